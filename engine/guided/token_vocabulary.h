// The vocabulary as structured output sees it: each token's bytes, and a trie over them in
// pre-order, so that the tokens a grammar allows are found by one walk that skips every subtree
// whose prefix the grammar already refuses (json_constraint.h).
#ifndef BLOSSOM_ENGINE_GUIDED_TOKEN_VOCABULARY_H_
#define BLOSSOM_ENGINE_GUIDED_TOKEN_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer.h"

namespace blossom {

// Immutable after construction: thread-safe.
class TokenVocabulary {
 public:
  // token_bytes[id] = the bytes token `id` adds to the output; empty = never generated under a
  // grammar (special tokens: their text is not part of a JSON output, and skip_special_tokens
  // would drop it).
  explicit TokenVocabulary(std::vector<std::string> token_bytes);

  // Every non-special token of `tokenizer` with its decoded bytes.
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
  // Empty for ids outside [0, size()).
  absl::string_view bytes(int32_t id) const {
    return id >= 0 && id < size() ? absl::string_view(token_bytes_[id]) : absl::string_view();
  }

  // The trie, node 0 the root (no byte), nodes in pre-order: node i's subtree is
  // [i, subtree_end(i)), and depth(i) is the length of its prefix.
  uint32_t nodes() const { return static_cast<uint32_t>(edge_byte_.size()); }
  uint8_t edge_byte(uint32_t i) const { return edge_byte_[i]; }
  uint32_t depth(uint32_t i) const { return depth_[i]; }
  uint32_t subtree_end(uint32_t i) const { return subtree_end_[i]; }
  uint32_t max_depth() const { return max_depth_; }
  // The tokens whose bytes are exactly node i's prefix.
  const int32_t* tokens_begin(uint32_t i) const { return token_ids_.data() + token_begin_[i]; }
  const int32_t* tokens_end(uint32_t i) const { return token_ids_.data() + token_begin_[i + 1]; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> edge_byte_;
  std::vector<uint32_t> depth_;
  std::vector<uint32_t> subtree_end_;
  std::vector<uint32_t> token_begin_;  // nodes() + 1 entries
  std::vector<int32_t> token_ids_;
  uint32_t max_depth_ = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_TOKEN_VOCABULARY_H_
