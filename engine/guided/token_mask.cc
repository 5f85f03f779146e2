#include "engine/guided/token_mask.h"

#include <utility>

namespace blossom {

std::shared_ptr<const TokenBitmask> MaskCache::Find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = masks_.find(key);
  return it == masks_.end() ? nullptr : it->second;
}

void MaskCache::Insert(std::string key, std::shared_ptr<const TokenBitmask> mask) {
  misses_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  masks_.emplace(std::move(key), std::move(mask));
}

}  // namespace blossom
