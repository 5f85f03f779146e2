// A regular expression (regex.h) as a DFA over code points, for the `pattern` and `format` of
// JSON Schema strings: a JSON matcher frame has room for one DFA state, not for an NFA's state
// set. Built by subset construction over the code point classes the pattern distinguishes;
// every state can still reach a match (each NFA state can), so a missing transition is the only
// way to fail.
#ifndef BLOSSOM_ENGINE_GUIDED_REGEX_DFA_H_
#define BLOSSOM_ENGINE_GUIDED_REGEX_DFA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/guided/regex.h"
#include "engine/text/utf8.h"

namespace blossom {

inline constexpr size_t kMaxRegexDfaStates = 4096;
// Transitions (states x code point classes), and the NFA states visited to build them: a pattern
// past either is refused rather than compiled for minutes into hundreds of megabytes. The work
// bound keeps one compile (done per request) near 0.15 s at worst: at 64M, a 34-byte pattern of
// nested counted repeats ((?:(?:aa|){,64}b){,32}...) took 1.3 s, found by the fuzzer.
inline constexpr size_t kMaxRegexDfaEntries = 4 << 20;
inline constexpr size_t kMaxRegexDfaWork = 4 << 20;

// Immutable once built.
struct RegexDfa {
  // Code point k's class: the last i with boundaries[i] <= k.
  std::vector<uint32_t> boundaries;
  // next[state * boundaries.size() + class]: the next state, or -1.
  std::vector<int32_t> next;
  std::vector<bool> accepting;
  // Per state, the code points it has a transition for (to test a partly read character).
  std::vector<CodePointClass> live;
  int32_t start = 0;

  // The state after `code_point`, or -1.
  int32_t Step(int32_t state, uint32_t code_point) const;
  // Some code point of [first, last] has a transition from `state`.
  bool AnyLive(int32_t state, uint32_t first, uint32_t last) const;
};

// Reads UTF-8 bytes through a RegexDfa (regex_constraint.h): a partly read character is refused
// as soon as nothing it can become has a transition, so the output never reaches a dead end.
// Thread-compatible; the DFA must outlive it.
class RegexDfaMatcher {
 public:
  struct State {
    int32_t dfa = 0;
    Utf8Partial utf8;  // the character being read
  };

  explicit RegexDfaMatcher(const RegexDfa* dfa) : dfa_(dfa) {}

  State Start() const;
  bool Advance(const State& state, uint8_t c, State* next) const;
  bool AdvanceAll(State& state, absl::string_view bytes) const;
  bool CanEnd(const State& state) const;
  static void AppendKey(const State& state, std::string* key);

 private:
  const RegexDfa* dfa_;
};

// Whole-match semantics, as regex.h. With `search` (JSON Schema's `pattern`, an ECMA-262 search),
// the pattern may match anywhere: a leading ^ or trailing $ anchors that end, otherwise any text
// may come before or after. InvalidArgument as CompileRegex, and past kMaxRegexDfaStates,
// kMaxRegexDfaEntries or kMaxRegexDfaWork. `work_left`, when given, is a budget several
// compiles share (a JSON schema's patterns): this one may use at most that much of
// kMaxRegexDfaWork, and what it used is taken off, so that many patterns cannot each cost the
// whole bound.
absl::StatusOr<RegexDfa> CompileRegexDfa(absl::string_view pattern, bool search,
                                         size_t* work_left = nullptr);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_REGEX_DFA_H_
