// libFuzzer entry point (tools/fuzz/fuzz.bzl): a JSON Schema, then a newline, then bytes read as
// the output. CompileJsonSchema must refuse what it cannot enforce with a Status; for a schema it
// accepts, the matcher reads the bytes, and every state it reaches must be able to go on: end
// there, or take some next byte. A state with neither is a dead end, where generation would find
// every token masked: the fuzzer traps on it.
#include <cstdint>
#include <string>

#include "engine/guided/json_grammar.h"
#include "engine/guided/json_matcher.h"

namespace {

bool CanGoOn(const blossom::JsonMatcher& matcher, const blossom::JsonState& state,
             blossom::JsonLinkArena& arena) {
  if (matcher.CanEnd(state, arena)) return true;
  blossom::JsonState next;
  for (int byte = 0; byte < 256; ++byte) {
    matcher.Advance(state, byte, arena, &next);
    if (!next.empty()) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string schema = input.substr(0, newline);
  const std::string text = newline == std::string::npos ? "" : input.substr(newline + 1);
  auto grammar = blossom::CompileJsonSchema(schema);
  if (!grammar.ok()) return 0;
  blossom::JsonMatcher matcher(&*grammar);
  blossom::JsonLinkArena arena;
  blossom::JsonState state = matcher.Start();
  if (!CanGoOn(matcher, state, arena)) __builtin_trap();
  blossom::JsonState next;
  for (size_t i = 0; i < text.size() && i < 4096; ++i) {
    matcher.Advance(state, static_cast<unsigned char>(text[i]), arena, &next);
    if (next.empty()) break;
    state.swap(next);
    if (!CanGoOn(matcher, state, arena)) __builtin_trap();
  }
  return 0;
}
