// Context-free grammars in GBNF, the notation of llama.cpp's `grammar` and of vLLM's
// `guided_grammar` (xgrammar reads the same EBNF), compiled to the flat form that
// grammar_matcher.h walks.
//
// What a grammar may say:
//   - rules `name ::= alternatives`; names of letters, digits, `-` and `_`; the output is a
//     whole `root`. A rule ends where the next `name ::=` starts, so alternatives and sequences
//     may span lines (llama.cpp needs a trailing `|` or parentheses for that; what it accepts is
//     read the same here). `#` starts a comment to the end of the line.
//   - terminals: "literal" strings, character classes `[a-z]`, `[^"\\]`, and `.` (any
//     character); escapes \n \r \t \\ \" \' \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH. Characters are
//     code points: the output is read as UTF-8 and always is valid UTF-8.
//   - groups `( ... )`, rule references, and the repeats `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`,
//     `{,n}` after any element (a literal repeats whole).
//
// Refused with InvalidArgument naming the rule or the byte offset: syntax errors, an undefined
// or twice-defined rule, no `root`, a class that matches no character, left recursion (a rule
// that can reach itself before reading a character: the matcher reads top-down, as llama.cpp's
// does, and would never stop expanding it; a repeat of what can match "" is one), a rule that can
// never finish (every alternative needs the rule again, so an output entering it could not end),
// and a grammar past kMaxGbnfBytes, kMaxGbnfRepeat or kMaxGbnfElements.
#ifndef BLOSSOM_ENGINE_GUIDED_GBNF_H_
#define BLOSSOM_ENGINE_GUIDED_GBNF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/guided/regex.h"

namespace blossom {

inline constexpr size_t kMaxGbnfBytes = 64 << 10;
// The largest count in `{m,n}`, and the elements the grammar may have once repeats and literals
// are spelled out: bounds on compile time, memory and a step's work.
inline constexpr int kMaxGbnfRepeat = 1000;
inline constexpr size_t kMaxGbnfElements = 1 << 17;

// Immutable once compiled. Each rule is a list of alternatives; an alternative is a run of
// elements in `elements`, ended by a kEnd element. Repeats and groups are compiled into rules of
// their own (named after the rule they appear in, for errors).
struct Grammar {
  enum class Kind : uint8_t { kEnd, kClass, kRule };
  struct Element {
    Kind kind = Kind::kEnd;
    int32_t index = -1;  // kClass: into `classes`; kRule: into `rules`
  };
  struct Rule {
    std::string name;
    std::vector<int32_t> alternatives;  // the position in `elements` each alternative starts at
  };
  std::vector<Element> elements;
  std::vector<Rule> rules;
  std::vector<CodePointClass> classes;  // none empty
  int32_t root = -1;
};

absl::StatusOr<Grammar> CompileGbnf(absl::string_view text);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_GBNF_H_
