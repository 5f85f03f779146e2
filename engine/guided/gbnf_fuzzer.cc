// libFuzzer entry point (tools/fuzz/fuzz.bzl): a grammar, then a NUL byte, then bytes read as the
// output. Compiling must refuse what it cannot match with a Status and stay within its bounds,
// and reading must stay within the matcher's. Two matchers whose arenas hold different ids (one
// has first read every single byte) must agree at every step on whether the byte is taken, on
// whether the text can end, and on the state's cache key: a key that depended on ids would
// serve one state's mask to another. Any disagreement traps.
#include <cstdint>
#include <string>

#include "engine/guided/gbnf.h"
#include "engine/guided/grammar_matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string text = input.substr(0, split);
  const std::string output = split == std::string::npos ? "" : input.substr(split + 1);
  auto grammar = blossom::CompileGbnf(text);
  if (!grammar.ok()) return 0;
  blossom::GrammarMatcher a(&*grammar);
  blossom::GrammarMatcher b(&*grammar);
  blossom::GrammarMatcher::State sa = a.Start();
  blossom::GrammarMatcher::State sb = b.Start();
  blossom::GrammarMatcher::State scratch;
  for (int byte = 255; byte >= 0; --byte) (void)b.Advance(sb, static_cast<uint8_t>(byte), &scratch);
  for (size_t i = 0; i <= output.size() && i < 256; ++i) {
    std::string key_a, key_b;
    if (a.AppendKey(sa, &key_a, 1 << 20) != b.AppendKey(sb, &key_b, 1 << 20)) __builtin_trap();
    if (key_a != key_b || a.CanEnd(sa) != b.CanEnd(sb)) __builtin_trap();
    if (i == output.size()) break;
    const std::string byte = output.substr(i, 1);
    const bool ok_a = a.AdvanceAll(sa, byte);
    if (ok_a != b.AdvanceAll(sb, byte)) __builtin_trap();
    if (!ok_a) break;
  }
  return 0;
}
