// Pieces every grammar constraint shares: the walk of the vocabulary trie that turns a matcher
// state into the bitmask of tokens that keep the output inside the grammar, and the cache of
// those masks by state.
#ifndef BLOSSOM_ENGINE_GUIDED_TOKEN_MASK_H_
#define BLOSSOM_ENGINE_GUIDED_TOKEN_MASK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

// Masks kept per constraint (each is vocabulary / 8 bytes: 31 KiB for BLOOM). Past it the cache
// starts again empty.
inline constexpr size_t kMaxCachedMasks = 128;

// A mask of `bits` tokens with `end_token` (when >= 0) allowed if `can_end`, and every token
// whose bytes `advance` reads from `start` without failing. `advance(const State& from, uint8_t
// byte, State* to)` returns false when the byte is refused. A node's state is its parent's stepped
// by one byte, so the walk costs one step per trie node it enters and skips every subtree whose
// prefix is refused.
template <typename State, typename Advance>
std::shared_ptr<const TokenBitmask> WalkVocabulary(const TokenVocabulary& v, const State& start,
                                                   bool can_end, int32_t end_token,
                                                   Advance advance) {
  const size_t bits = std::max<size_t>(v.size(), end_token + 1);
  auto mask = std::make_shared<TokenBitmask>((bits + 63) / 64, 0);
  auto allow = [&](int32_t id) { (*mask)[id / 64] |= uint64_t{1} << (id % 64); };
  if (end_token >= 0 && can_end) allow(end_token);
  // levels[d]: the state after the first d bytes of the current node's prefix.
  std::vector<State> levels(v.max_depth() + 1);
  levels[0] = start;
  for (uint32_t i = 1; i < v.nodes();) {
    const uint32_t d = v.depth(i);
    if (!advance(levels[d - 1], v.edge_byte(i), &levels[d])) {
      i = v.subtree_end(i);
      continue;
    }
    for (const int32_t* t = v.tokens_begin(i); t != v.tokens_end(i); ++t) allow(*t);
    ++i;
  }
  return mask;
}

// Masks by the bytes of a matcher state (and end token). Thread-safe.
class MaskCache {
 public:
  std::shared_ptr<const TokenBitmask> Find(const std::string& key) const;
  void Insert(std::string key, std::shared_ptr<const TokenBitmask> mask);
  // The mask cached for `key`, or `compute()`'s, cached then. Two threads missing the same key
  // both compute it (the same mask): the walk runs outside the lock.
  template <typename Compute>
  std::shared_ptr<const TokenBitmask> GetOrCompute(std::string key, Compute compute) {
    if (std::shared_ptr<const TokenBitmask> mask = Find(key)) return mask;
    std::shared_ptr<const TokenBitmask> mask = compute();
    Insert(std::move(key), mask);
    return mask;
  }
  // Masks computed, not found (for tests and benchmarks).
  int64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mu_;  // std::mutex, not absl::Mutex: TSan sees it (server/metrics/metrics.h)
  absl::flat_hash_map<std::string, std::shared_ptr<const TokenBitmask>> masks_
      ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> misses_{0};
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_TOKEN_MASK_H_
