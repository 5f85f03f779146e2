#include "engine/scheduler/block_manager.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "absl/strings/str_cat.h"

namespace blossom {

int64_t BlocksInBudget(int64_t budget_bytes, size_t bytes_per_block) {
  if (bytes_per_block == 0 || budget_bytes <= 0) return 0;
  return std::min<int64_t>(budget_bytes / static_cast<int64_t>(bytes_per_block), int64_t{1} << 30);
}
namespace {

// 64x64 -> 128 multiply, folded: the mixing step of wyhash.
inline uint64_t MulFold(uint64_t a, uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

constexpr uint64_t kSecret0 = 0xa0761d6478bd642full;
constexpr uint64_t kSecret1 = 0xe7037ed1a0b428dbull;
constexpr uint64_t kSecret2 = 0x8ebc6af09c88c6e3ull;
constexpr uint64_t kSecret3 = 0x589965cc75374cc3ull;

}  // namespace

uint64_t DefaultBlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens) {
  uint64_t h = MulFold(parent_hash ^ kSecret0, static_cast<uint64_t>(tokens.size()) ^ kSecret1);
  size_t i = 0;
  // Two tokens per 64-bit word; the running state is folded in on both sides of the multiply so
  // a zero word cannot wipe it.
  for (; i + 1 < tokens.size(); i += 2) {
    const uint64_t w = static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) |
                       (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32);
    h = MulFold(w ^ kSecret2 ^ h, h ^ kSecret3) ^ h;
  }
  if (i < tokens.size()) {
    const uint64_t w = static_cast<uint64_t>(static_cast<uint32_t>(tokens[i]));
    h = MulFold(w ^ kSecret2 ^ h, h ^ kSecret3) ^ h;
  }
  return MulFold(h ^ kSecret1, kSecret0 ^ 0x9e3779b97f4a7c15ull);
}

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                           BlockHashFn hash_fn)
    : block_size_(block_size > 0 ? block_size : 1),
      enable_prefix_caching_(enable_prefix_caching),
      hash_fn_(hash_fn != nullptr ? hash_fn : &DefaultBlockHash),
      blocks_(static_cast<size_t>(std::max(num_blocks, 0))) {
  // Ascending ids at start only to make plans predictable in tests.
  for (int32_t b = 0; b < this->num_blocks(); ++b) PushBack(b);
}

int32_t BlockManager::BlocksNeeded(int32_t num_tokens) const {
  if (num_tokens <= 0) return 0;
  return (num_tokens + block_size_ - 1) / block_size_;
}

int32_t BlockManager::MaxMatchableBlocks(int32_t num_tokens) const {
  // vLLM's rule: at least the last token is computed, so its logits exist for sampling.
  if (!enable_prefix_caching_ || num_tokens <= 1) return 0;
  return (num_tokens - 1) / block_size_;
}

BlockManager::PrefixMatch BlockManager::MatchPrefix(absl::Span<const int32_t> tokens,
                                                    int32_t max_blocks) const {
  PrefixMatch match;
  uint64_t parent_hash = 0;
  uint64_t parent_uid = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const absl::Span<const int32_t> chunk =
        tokens.subspan(static_cast<size_t>(i) * block_size_, static_cast<size_t>(block_size_));
    const uint64_t h = hash_fn_(parent_hash, chunk);
    auto it = cache_.find(h);
    if (it == cache_.end()) break;
    const Block& blk = blocks_[it->second];
    // The hash only nominates a candidate; the stored content decides.
    if (blk.parent_uid != parent_uid ||
        !std::equal(blk.tokens.begin(), blk.tokens.end(), chunk.begin(), chunk.end())) {
      break;
    }
    match.blocks.push_back(it->second);
    match.hashes.push_back(h);
    parent_hash = h;
    parent_uid = blk.uid;
  }
  return match;
}

int32_t BlockManager::CachedPrefixLength(absl::Span<const int32_t> tokens, bool use_cache) const {
  const int32_t max_blocks =
      use_cache ? MaxMatchableBlocks(static_cast<int32_t>(tokens.size())) : 0;
  if (max_blocks == 0) return 0;
  return static_cast<int32_t>(MatchPrefix(tokens, max_blocks).blocks.size()) * block_size_;
}

absl::StatusOr<int32_t> BlockManager::AllocatePrompt(SeqId id, absl::Span<const int32_t> tokens,
                                                     int32_t num_tokens_to_allocate,
                                                     bool use_cache, bool count_query) {
  if (tokens.empty()) return absl::InvalidArgumentError("AllocatePrompt: empty token list");
  if (num_tokens_to_allocate < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllocatePrompt: num_tokens_to_allocate must be >= 1, got ", num_tokens_to_allocate));
  }
  if (seqs_.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("AllocatePrompt: sequence ", id, " already has a block table"));
  }
  const int32_t num_tokens = static_cast<int32_t>(tokens.size());
  const int32_t max_blocks = use_cache ? MaxMatchableBlocks(num_tokens) : 0;
  PrefixMatch match;
  if (max_blocks > 0) match = MatchPrefix(tokens, max_blocks);
  const int32_t num_hit = static_cast<int32_t>(match.blocks.size());
  const int32_t total = std::max(BlocksNeeded(num_tokens_to_allocate), num_hit);
  const int32_t fresh = total - num_hit;
  // Hit blocks sitting in the free list stop being free, so they do not count towards `fresh`.
  int32_t hits_in_free = 0;
  for (int32_t b : match.blocks) hits_in_free += blocks_[b].ref_count == 0 ? 1 : 0;
  if (fresh > num_free_ - hits_in_free) {
    return absl::ResourceExhaustedError(absl::StrCat("AllocatePrompt: sequence ", id, " needs ",
                                                     fresh, " free KV blocks, ",
                                                     num_free_ - hits_in_free, " available"));
  }

  SeqBlocks& seq = seqs_[id];
  seq.table.reserve(static_cast<size_t>(total));
  for (int32_t i = 0; i < num_hit; ++i) {
    const int32_t b = match.blocks[i];
    Block& blk = blocks_[b];
    if (blk.ref_count == 0) Unlink(b);
    ++blk.ref_count;
    seq.table.push_back(b);
    seq.chain_hash.push_back(match.hashes[i]);
    seq.chain_uid.push_back(blk.uid);
  }
  for (int32_t i = 0; i < fresh; ++i) seq.table.push_back(AllocateFreshBlock());

  if (enable_prefix_caching_ && use_cache && count_query) {
    stats_.prefix_cache_queries_tokens += num_tokens;
    stats_.prefix_cache_queries_blocks += max_blocks;
    stats_.prefix_cache_hit_tokens += static_cast<int64_t>(num_hit) * block_size_;
    stats_.prefix_cache_hit_blocks += num_hit;
  }
  return num_hit * block_size_;
}

bool BlockManager::CanAppend(SeqId id, int32_t new_total_tokens) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  const int32_t extra =
      BlocksNeeded(new_total_tokens) - static_cast<int32_t>(it->second.table.size());
  return extra <= num_free_;
}

absl::Status BlockManager::Append(SeqId id, int32_t new_total_tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("Append: unknown sequence ", id));
  }
  std::vector<int32_t>& table = it->second.table;
  const int32_t extra = BlocksNeeded(new_total_tokens) - static_cast<int32_t>(table.size());
  if (extra <= 0) return absl::OkStatus();
  if (extra > num_free_) {
    return absl::ResourceExhaustedError(absl::StrCat("Append: sequence ", id, " needs ", extra,
                                                     " free KV blocks, ", num_free_, " available"));
  }
  for (int32_t i = 0; i < extra; ++i) table.push_back(AllocateFreshBlock());
  return absl::OkStatus();
}

void BlockManager::MarkComputed(SeqId id, absl::Span<const int32_t> all_tokens,
                                int32_t num_computed_tokens) {
  if (!enable_prefix_caching_) return;
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  SeqBlocks& seq = it->second;
  const int64_t computed = std::min<int64_t>(
      {static_cast<int64_t>(num_computed_tokens), static_cast<int64_t>(all_tokens.size()),
       static_cast<int64_t>(seq.table.size()) * block_size_});
  const int32_t full_blocks = static_cast<int32_t>(computed / block_size_);
  for (int32_t i = static_cast<int32_t>(seq.chain_hash.size()); i < full_blocks; ++i) {
    const uint64_t parent_hash = i > 0 ? seq.chain_hash[i - 1] : 0;
    const uint64_t parent_uid = i > 0 ? seq.chain_uid[i - 1] : 0;
    const absl::Span<const int32_t> chunk =
        all_tokens.subspan(static_cast<size_t>(i) * block_size_, static_cast<size_t>(block_size_));
    const uint64_t h = hash_fn_(parent_hash, chunk);
    uint64_t uid;
    auto cit = cache_.find(h);
    if (cit != cache_.end() && IsOrphan(cit->second)) {
      // A cached block no prompt can reach any more (its parent was evicted after it was
      // cached on it): it would only shadow ours, and with it every block after ours.
      const int32_t orphan = cit->second;
      DropCacheEntry(orphan);
      if (blocks_[orphan].ref_count == 0) {  // holds nothing reusable now: reuse it first
        Unlink(orphan);
        PushFront(orphan);
      }
      cit = cache_.end();
    }
    if (cit == cache_.end()) {
      const int32_t b = seq.table[i];
      Block& blk = blocks_[b];
      assert(!blk.cached && blk.ref_count == 1);
      blk.cached = true;
      blk.hash = h;
      blk.parent_hash = parent_hash;
      blk.uid = next_uid_++;
      blk.parent_uid = parent_uid;
      blk.tokens.assign(chunk.begin(), chunk.end());
      cache_.emplace(h, b);
      uid = blk.uid;
    } else {
      const Block& other = blocks_[cit->second];
      if (other.parent_uid == parent_uid &&
          std::equal(other.tokens.begin(), other.tokens.end(), chunk.begin(), chunk.end())) {
        // Same content computed twice (two sequences prefilling the same prefix concurrently):
        // keep ours private and chain on the cached twin, so our later blocks stay findable.
        uid = other.uid;
      } else {
        // Genuine hash collision with different content: ours stays uncached, and a fresh uid
        // that no cached block carries keeps descendants from ever matching the wrong parent.
        uid = next_uid_++;
      }
    }
    seq.chain_hash.push_back(h);
    seq.chain_uid.push_back(uid);
  }
}

void BlockManager::Truncate(SeqId id, int32_t num_tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  SeqBlocks& seq = it->second;
  const size_t keep = static_cast<size_t>(std::max(0, BlocksNeeded(num_tokens)));
  while (seq.table.size() > std::max(keep, seq.chain_hash.size())) {
    Unreference(seq.table.back());
    seq.table.pop_back();
  }
}

void BlockManager::Unreference(int32_t b) {
  Block& blk = blocks_[b];
  assert(blk.ref_count > 0);
  if (--blk.ref_count == 0) {
    if (blk.cached) {
      PushBack(b);  // most recently used: evicted last
    } else {
      PushFront(b);  // holds nothing reusable: reuse first
    }
  }
}

void BlockManager::Free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const std::vector<int32_t>& table = it->second.table;
  for (auto rit = table.rbegin(); rit != table.rend(); ++rit) Unreference(*rit);
  seqs_.erase(it);
}

absl::Span<const int32_t> BlockManager::BlockTable(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return {};
  return it->second.table;
}

std::vector<int32_t> BlockManager::FreeListInEvictionOrder() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (int32_t b = free_head_; b != kNil; b = blocks_[b].next) out.push_back(b);
  return out;
}

void BlockManager::PushFront(int32_t b) {
  Block& blk = blocks_[b];
  blk.prev = kNil;
  blk.next = free_head_;
  if (free_head_ != kNil) blocks_[free_head_].prev = b;
  free_head_ = b;
  if (free_tail_ == kNil) free_tail_ = b;
  blk.in_free_list = true;
  ++num_free_;
}

void BlockManager::PushBack(int32_t b) {
  Block& blk = blocks_[b];
  blk.next = kNil;
  blk.prev = free_tail_;
  if (free_tail_ != kNil) blocks_[free_tail_].next = b;
  free_tail_ = b;
  if (free_head_ == kNil) free_head_ = b;
  blk.in_free_list = true;
  ++num_free_;
}

void BlockManager::Unlink(int32_t b) {
  Block& blk = blocks_[b];
  assert(blk.in_free_list);
  if (blk.prev != kNil) {
    blocks_[blk.prev].next = blk.next;
  } else {
    free_head_ = blk.next;
  }
  if (blk.next != kNil) {
    blocks_[blk.next].prev = blk.prev;
  } else {
    free_tail_ = blk.prev;
  }
  blk.prev = blk.next = kNil;
  blk.in_free_list = false;
  --num_free_;
}

int32_t BlockManager::AllocateFreshBlock() {
  const int32_t b = free_head_;
  assert(b != kNil);
  Unlink(b);
  if (blocks_[b].cached) {
    DropCacheEntry(b);
    ++stats_.cached_block_evictions;
  }
  blocks_[b].ref_count = 1;
  return b;
}

bool BlockManager::IsOrphan(int32_t b) const {
  const Block& blk = blocks_[b];
  if (blk.parent_uid == 0) return false;  // a first block: nothing above it to lose
  auto parent = cache_.find(blk.parent_hash);
  return parent == cache_.end() || blocks_[parent->second].uid != blk.parent_uid;
}

void BlockManager::DropCacheEntry(int32_t b) {
  Block& blk = blocks_[b];
  auto it = cache_.find(blk.hash);
  if (it != cache_.end() && it->second == b) cache_.erase(it);
  blk.cached = false;
  blk.hash = blk.parent_hash = blk.uid = blk.parent_uid = 0;
  blk.tokens.clear();
}

absl::Status BlockManager::CheckInvariants() const {
  const int32_t n = num_blocks();
  std::vector<int32_t> refs(static_cast<size_t>(n), 0);
  std::vector<int64_t> last_table(static_cast<size_t>(n), -1);  // detects a block twice in a table
  int64_t table_index = 0;
  for (const auto& [id, seq] : seqs_) {
    ++table_index;
    if (seq.chain_hash.size() != seq.chain_uid.size() || seq.chain_hash.size() > seq.table.size()) {
      return absl::InternalError(absl::StrCat("seq ", id, ": chain size mismatch"));
    }
    for (size_t i = 0; i < seq.table.size(); ++i) {
      const int32_t b = seq.table[i];
      if (b < 0 || b >= n) return absl::InternalError(absl::StrCat("seq ", id, ": bad block ", b));
      ++refs[b];
      if (last_table[b] == table_index) {
        return absl::InternalError(absl::StrCat("seq ", id, ": block ", b, " twice in table"));
      }
      last_table[b] = table_index;
      // A cached block in a table carries the uid this sequence chains on.
      if (i < seq.chain_uid.size() && blocks_[b].cached &&
          (blocks_[b].uid != seq.chain_uid[i] || blocks_[b].hash != seq.chain_hash[i])) {
        return absl::InternalError(
            absl::StrCat("seq ", id, ": cached block ", b, " identity differs from chain"));
      }
    }
  }
  for (int32_t b = 0; b < n; ++b) {
    if (refs[b] != blocks_[b].ref_count) {
      return absl::InternalError(absl::StrCat("block ", b, ": ref_count ", blocks_[b].ref_count,
                                              " but held by ", refs[b], " tables"));
    }
    if ((blocks_[b].ref_count == 0) != blocks_[b].in_free_list) {
      return absl::InternalError(absl::StrCat("block ", b, ": ref_count ", blocks_[b].ref_count,
                                              " but in_free_list=", blocks_[b].in_free_list));
    }
  }
  // Walk the free list both ways.
  int32_t count = 0;
  bool seen_cached = false;
  std::vector<bool> seen(static_cast<size_t>(n), false);
  int32_t prev = kNil;
  for (int32_t b = free_head_; b != kNil; b = blocks_[b].next) {
    if (b < 0 || b >= n || seen[b] || ++count > n) {
      return absl::InternalError("free list corrupt (cycle or bad id)");
    }
    seen[b] = true;
    if (blocks_[b].prev != prev) return absl::InternalError("free list back link broken");
    if (!blocks_[b].in_free_list || blocks_[b].ref_count != 0) {
      return absl::InternalError(absl::StrCat("block ", b, " in free list but referenced"));
    }
    if (blocks_[b].cached) {
      seen_cached = true;
    } else if (seen_cached) {
      return absl::InternalError(
          absl::StrCat("uncached free block ", b, " after a cached one (eviction order)"));
    }
    prev = b;
  }
  if (prev != free_tail_) return absl::InternalError("free list tail mismatch");
  if (count != num_free_) {
    return absl::InternalError(
        absl::StrCat("free list has ", count, " blocks, num_free_ ", num_free_));
  }
  // Cache map <-> cached blocks.
  for (const auto& [h, b] : cache_) {
    if (b < 0 || b >= n) return absl::InternalError("cache entry with bad block id");
    const Block& blk = blocks_[b];
    if (!blk.cached || blk.hash != h) {
      return absl::InternalError(absl::StrCat("cache entry -> block ", b, " not cached under it"));
    }
    if (static_cast<int32_t>(blk.tokens.size()) != block_size_) {
      return absl::InternalError(absl::StrCat("cached block ", b, " not full"));
    }
    if (hash_fn_(blk.parent_hash, blk.tokens) != h) {
      return absl::InternalError(absl::StrCat("cached block ", b, " tokens do not hash to key"));
    }
  }
  int32_t num_cached = 0;
  for (int32_t b = 0; b < n; ++b) {
    if (!blocks_[b].cached) continue;
    ++num_cached;
    auto it = cache_.find(blocks_[b].hash);
    if (it == cache_.end() || it->second != b) {
      return absl::InternalError(absl::StrCat("cached block ", b, " missing from the map"));
    }
  }
  if (num_cached != static_cast<int32_t>(cache_.size())) {
    return absl::InternalError("cached block count differs from map size");
  }
  if (!enable_prefix_caching_ && num_cached != 0) {
    return absl::InternalError("cache entries with prefix caching off");
  }
  return absl::OkStatus();
}

}  // namespace blossom
