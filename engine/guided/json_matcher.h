// The byte-level matcher of a JsonGrammar: a pushdown automaton that reads the output one byte at
// a time and says whether it is still the beginning of a JSON text the grammar allows.
//
// A state is a small set of stacks (a union such as anyOf, or "string or null", keeps one stack
// per alternative until the bytes tell them apart). Stacks are persistent: frames below the top
// live in a JsonLinkArena and are shared, so that a step copies only the top frame. This is what
// makes the vocabulary walk of json_constraint.h cheap: it steps one state per trie edge.
//
// Whitespace is allowed where JSON allows it, at most JsonGrammar::max_whitespace bytes in a row
// (kMaxJsonWhitespace by default), so that a model cannot loop on newlines forever; none after
// the value (the end token follows it).
// Nesting is limited to kMaxJsonOutputDepth frames.
//
// Thread-compatible: a JsonMatcher is immutable; an arena belongs to one thread.
#ifndef BLOSSOM_ENGINE_GUIDED_JSON_MATCHER_H_
#define BLOSSOM_ENGINE_GUIDED_JSON_MATCHER_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "engine/guided/json_grammar.h"

namespace blossom {

// A state keeps at most this many stacks; alternatives past it are dropped, which can only make
// the grammar narrower (never lets a wrong byte through).
inline constexpr size_t kMaxJsonStacks = 64;

// One level of the pushdown stack: the node being read and how far. No padding, so that frames
// compare and hash as bytes.
struct JsonFrame {
  int32_t node = 0;    // kRootFrame or an index into JsonGrammar::nodes
  uint8_t phase = 0;   // where in the node's syntax (json_matcher.cc)
  uint8_t ws = 0;      // whitespace bytes read in a row in this phase
  uint16_t sub = 0;    // number sub-state, pending UTF-8 bytes, \u digits, or literal position
  uint32_t a = 0;      // object: next property; array: items (capped); string: length (capped);
                       // literal: candidate
  uint32_t b = 0;      // object: the property being read; literal and key: bytes matched;
                       // string: the character being read (UTF-8 bits, \u digits)
  int32_t dfa = 0;     // string with a pattern or format: its DFA state
};
static_assert(sizeof(JsonFrame) == 20, "JsonFrame must have no padding");

struct JsonLink {
  JsonFrame frame;
  const JsonLink* parent;
};

struct JsonStack {
  JsonFrame top;
  const JsonLink* parent = nullptr;  // null for the root frame
  uint32_t depth = 1;
};

using JsonState = absl::InlinedVector<JsonStack, 2>;

// Owns the frames below the tops of the states built with it; clear it only when no state built
// with it is used any more.
class JsonLinkArena {
 public:
  const JsonLink* New(const JsonFrame& frame, const JsonLink* parent) {
    links_.push_back(JsonLink{frame, parent});
    return &links_.back();
  }
  void Clear() { links_.clear(); }
  size_t size() const { return links_.size(); }

 private:
  std::deque<JsonLink> links_;
};

class JsonMatcher {
 public:
  // `grammar` must outlive the matcher.
  explicit JsonMatcher(const JsonGrammar* grammar) : grammar_(grammar) {}

  // Nothing read yet.
  JsonState Start() const;

  // The state after reading byte `c` (0-255) in `state`; empty when the byte is not allowed.
  void Advance(const JsonState& state, int c, JsonLinkArena& arena, JsonState* next) const;

  // Reads `bytes`; false (with `state` empty) as soon as one is not allowed.
  bool AdvanceAll(JsonState& state, absl::string_view bytes, JsonLinkArena& arena) const;

  // True when the bytes read so far are a whole JSON text the grammar allows.
  bool CanEnd(const JsonState& state, JsonLinkArena& arena) const;

  // Appends `state` as bytes: equal keys <=> equal states (the masks of json_constraint.h are
  // cached by it).
  static void AppendKey(const JsonState& state, std::string* key);

 private:
  class Stepper;
  const JsonGrammar* grammar_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_JSON_MATCHER_H_
