// libFuzzer entry point (tools/fuzz/fuzz.bzl): a pattern, then a newline, then bytes read as the
// output. Compiling must refuse what it cannot match with a Status and stay within its bounds;
// for a pattern it accepts, the NFA and DFA matchers must agree on whether the bytes match, and
// every state the DFA matcher reaches must be able to go on (end, or take some next byte): a
// dead end would leave generation with every token masked. Either disagreement traps.
#include <cstdint>
#include <string>

#include "engine/guided/regex.h"
#include "engine/guided/regex_dfa.h"

namespace {

bool CanGoOn(const blossom::RegexDfaMatcher& matcher, const blossom::RegexDfaMatcher::State& s) {
  if (matcher.CanEnd(s)) return true;
  blossom::RegexDfaMatcher::State next;
  for (int byte = 0; byte < 256; ++byte) {
    if (matcher.Advance(s, static_cast<uint8_t>(byte), &next)) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string pattern = input.substr(0, newline);
  const std::string text = newline == std::string::npos ? "" : input.substr(newline + 1);
  (void)blossom::CompileRegexDfa(pattern, /*search=*/true);
  auto nfa = blossom::CompileRegex(pattern);
  auto dfa = blossom::CompileRegexDfa(pattern, /*search=*/false);
  if (!nfa.ok() || !dfa.ok()) return 0;
  blossom::RegexMatcher by_nfa(&*nfa);
  blossom::RegexDfaMatcher by_dfa(&*dfa);
  blossom::RegexMatcher::State a = by_nfa.Start();
  blossom::RegexDfaMatcher::State b = by_dfa.Start();
  if (!CanGoOn(by_dfa, b)) __builtin_trap();
  bool alive = true;
  for (size_t i = 0; i < text.size() && i < 1024 && alive; ++i) {
    const std::string byte = text.substr(i, 1);
    const bool nfa_ok = by_nfa.AdvanceAll(a, byte);
    const bool dfa_ok = by_dfa.AdvanceAll(b, byte);
    if (nfa_ok != dfa_ok) __builtin_trap();
    alive = dfa_ok;
    if (alive && !CanGoOn(by_dfa, b)) __builtin_trap();
  }
  if (alive && by_nfa.CanEnd(a) != by_dfa.CanEnd(b)) __builtin_trap();
  return 0;
}
