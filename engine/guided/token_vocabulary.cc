#include "engine/guided/token_vocabulary.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace blossom {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes)
    : token_bytes_(std::move(token_bytes)) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id) {
    if (!token_bytes_[id].empty()) order.push_back(id);
  }
  // Sorted by bytes, the tokens come in the trie's pre-order: each one shares with the previous
  // one the path to their longest common prefix and adds nodes below it.
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return token_bytes_[x] != token_bytes_[y] ? token_bytes_[x] < token_bytes_[y] : x < y;
  });
  edge_byte_.push_back(0);
  depth_.push_back(0);
  subtree_end_.push_back(0);
  token_begin_.push_back(0);
  std::vector<uint32_t> path = {0};  // the node at each depth of the previous token's path
  absl::string_view previous;
  auto close_to = [&](size_t keep) {
    while (path.size() > keep) {
      subtree_end_[path.back()] = nodes();
      path.pop_back();
    }
  };
  for (int32_t id : order) {
    const absl::string_view bytes = token_bytes_[id];
    size_t common = 0;
    const size_t limit = std::min(bytes.size(), previous.size());
    while (common < limit && bytes[common] == previous[common]) ++common;
    close_to(common + 1);
    for (size_t d = common; d < bytes.size(); ++d) {
      path.push_back(nodes());
      edge_byte_.push_back(static_cast<uint8_t>(bytes[d]));
      depth_.push_back(static_cast<uint32_t>(d + 1));
      subtree_end_.push_back(0);
      token_begin_.push_back(static_cast<uint32_t>(token_ids_.size()));
    }
    token_ids_.push_back(id);
    max_depth_ = std::max<uint32_t>(max_depth_, static_cast<uint32_t>(bytes.size()));
    previous = bytes;
  }
  close_to(0);
  token_begin_.push_back(static_cast<uint32_t>(token_ids_.size()));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.IsSpecial(id)) {
      bytes[id] = std::string(tokenizer.DecodedBytes(id, /*skip_special_tokens=*/false));
    }
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes));
}

}  // namespace blossom
