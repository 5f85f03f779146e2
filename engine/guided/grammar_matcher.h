// Reads UTF-8 bytes through a context-free Grammar (gbnf.h) top-down, as llama.cpp's grammar
// sampler does: the state is the set of parse stacks the text so far allows. A stack is a path
// from the next character class to read back out to `root`: the position to go on from in each
// rule entered. Stacks are links in an arena (shared tails, interned, so equal stacks are one
// id): a step rewrites only their tops.
//
// Bounds, so that an ambiguous or deeply recursive grammar costs a bounded step: a link that
// would make a stack deeper than kMaxGrammarStackDepth is not made (that derivation is dropped
// where it would go deeper; a text that needs it is refused there, which can leave a state
// with no next character: the constraint reports that), and a character whose step would need
// more than kMaxGrammarStacks stacks or kMaxGrammarStepWork expansions is refused. Both depend
// only on the text, never on what the matcher computed before, so a replay of an output
// reaches the same states as the steps that generated it. An expansion visits each (position,
// stack below) pair once, so a grammar of many empty alternatives costs its pairs, not its
// exponentially many derivations. The total work and the arena's size are counted for the
// constraint, which bounds a call's (work_done, links).
//
// What a stack leads to once its top character is read depends on the stack alone, so it is
// computed once per stack and kept: a trie walk through a free-text state, where every node
// steps the same stacks, expands each of them once.
#ifndef BLOSSOM_ENGINE_GUIDED_GRAMMAR_MATCHER_H_
#define BLOSSOM_ENGINE_GUIDED_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "engine/guided/gbnf.h"
#include "engine/text/utf8.h"

namespace blossom {

inline constexpr size_t kMaxGrammarStacks = 128;
inline constexpr uint32_t kMaxGrammarStackDepth = 1024;
inline constexpr size_t kMaxGrammarStepWork = 1 << 16;

// Thread-compatible (the arena grows as it reads); the grammar must outlive it. States are only
// meaningful to the matcher that made them.
class GrammarMatcher {
 public:
  struct State {
    std::vector<uint32_t> stacks;  // arena ids, ascending; kBottom: the text may end here
    Utf8Partial utf8;              // the character being read
  };

  explicit GrammarMatcher(const Grammar* grammar);

  // Empty stacks when the start itself is past the bounds.
  State Start();
  bool Advance(const State& state, uint8_t c, State* next);
  bool AdvanceAll(State& state, absl::string_view bytes);
  bool CanEnd(const State& state) const;
  // Work so far: stacks stepped (a class test and a merge each) and expansion steps; and the
  // links in the arena. What a call costs, which the constraint bounds.
  size_t work_done() const { return work_done_; }
  size_t links() const { return links_.size(); }
  // The state's stacks by their contents, not their ids: the same key from any matcher. False
  // (and nothing appended) when the key would pass `max_bytes` (a deep state's key is its
  // whole stacks).
  bool AppendKey(const State& state, std::string* key, size_t max_bytes) const;

 private:
  static constexpr uint32_t kBottom = 0;
  struct Link {
    int32_t pos;      // in grammar elements: a class to read, or where to go on after a rule
    uint32_t parent;  // the rest of the stack
    uint32_t depth;
  };

  // The stack for `pos` over `parent`, or kBottom past the depth bound (the caller drops it).
  uint32_t Intern(int32_t pos, uint32_t parent);
  // Appends to *out the stacks (tops at classes, or kBottom) reached from going on at `pos` over
  // `parent` without reading. False past kMaxGrammarStepWork.
  bool Expand(int32_t pos, uint32_t parent, std::vector<uint32_t>* out, size_t* work);
  // What `stack` leads to once its top character is read.
  struct Expansion {
    uint32_t begin = 0, end = 0;  // in expanded_
    uint32_t work = 0;
    bool ok = false;  // false: past kMaxGrammarStepWork on its own
  };
  const Expansion& ExpansionOf(uint32_t stack);
  bool Step(const State& state, uint32_t code_point, State* next);
  const CodePointClass& TopClass(uint32_t stack) const;

  const Grammar* grammar_;
  std::vector<Link> links_;
  absl::flat_hash_map<uint64_t, uint32_t> interned_;
  std::vector<std::pair<int32_t, uint32_t>> todo_;
  std::vector<int32_t> expansion_of_;  // by link id: into expansions_, or -1
  std::vector<Expansion> expansions_;
  std::vector<uint32_t> expanded_;
  std::vector<uint32_t> scratch_;
  absl::flat_hash_set<uint64_t> visited_;  // Expand's (position, stack below) pairs
  size_t work_done_ = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_GRAMMAR_MATCHER_H_
