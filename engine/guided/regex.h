// A regular expression compiled into an NFA over Unicode code points, and its byte-level matcher:
// vLLM's guided_regex and TGI's regex grammar, where the whole output must match.
//
// Syntax (the common subset of Python's re and ECMAScript that vLLM's backends accept):
// literals; `.` (any character but \n); classes [...] with ranges and negation; escapes \d \D
// \w \W \s \S \n \t \r \f \v \xHH \uHHHH and any escaped punctuation; groups (...), (?:...),
// (?P<name>...) and (?<name>...); alternation |; quantifiers * + ? {n} {n,} {n,m}, each with an
// optional lazy `?` (the same language); ^ at the start and $ at the end (the match is whole
// anyway). Refused with InvalidArgument naming the construct: backreferences, lookaround, \b,
// flags, possessive quantifiers, and anchors anywhere else.
//
// Thread-compatible: a RegexMatcher is immutable.
#ifndef BLOSSOM_ENGINE_GUIDED_REGEX_H_
#define BLOSSOM_ENGINE_GUIDED_REGEX_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/text/utf8.h"

namespace blossom {

inline constexpr size_t kMaxRegexBytes = 16 * 1024;
// States after repetitions are unrolled ({n,m} copies its operand m times).
inline constexpr size_t kMaxRegexStates = 20000;
// The last Unicode code point.
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Code point ranges [first, last], sorted and disjoint.
using CodePointClass = std::vector<std::pair<uint32_t, uint32_t>>;

struct RegexNfa {
  // A state either reads one character of `cls` and moves to `next`, or is the accepting state
  // (cls == -1). Epsilon moves are resolved at compilation: `follow[i]` is the set of reading and
  // accepting states reached from state i's `next` without reading.
  struct State {
    int32_t cls = -1;
    std::vector<int32_t> follow;  // sorted
  };
  std::vector<State> states;
  std::vector<CodePointClass> classes;
  std::vector<int32_t> start;  // sorted: the states reached before reading anything
};

// InvalidArgument naming the problem and its byte offset.
absl::StatusOr<RegexNfa> CompileRegex(absl::string_view pattern);

// `code_point` is in `ranges`.
bool ClassContains(const CodePointClass& ranges, uint32_t code_point);
// Some code point of [first, last] is in `ranges`.
bool ClassIntersects(const CodePointClass& ranges, uint32_t first, uint32_t last);

class RegexMatcher {
 public:
  // The NFA states the text so far can be in, and a UTF-8 character being read.
  struct State {
    absl::InlinedVector<int32_t, 8> nfa;  // sorted
    Utf8Partial utf8;                     // the character being read
  };

  // `nfa` must outlive the matcher.
  explicit RegexMatcher(const RegexNfa* nfa) : nfa_(nfa) {}

  State Start() const;
  // The state after byte `c`; false (and `next` unspecified) when no match can continue. A
  // partly read character is refused as soon as no character it can become can match, so that a
  // lead byte alone is never allowed where it leads nowhere (a dead end for the output).
  bool Advance(const State& state, uint8_t c, State* next) const;
  bool AdvanceAll(State& state, absl::string_view bytes) const;
  // The text so far is a whole match.
  bool CanEnd(const State& state) const;
  static void AppendKey(const State& state, std::string* key);

 private:
  bool ReadCodePoint(const State& state, uint32_t code_point, State* next) const;
  bool CanStillMatch(const State& partial) const;  // some character it can become matches
  const RegexNfa* nfa_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_REGEX_H_
