// Paged KV-cache bookkeeping: which physical KV blocks each sequence owns, and which full blocks
// can be shared between sequences through the prefix cache.
//
// Pure bookkeeping: no device, no threads, no clocks. The engine turns a block table into KV slot
// addresses (slot = table[pos / block_size] * block_size + pos % block_size); attention reads K/V
// only through block tables, so this class is the single owner of KV placement.
#ifndef BLOSSOM_ENGINE_SCHEDULER_BLOCK_MANAGER_H_
#define BLOSSOM_ENGINE_SCHEDULER_BLOCK_MANAGER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace blossom {

// Identifies one request/sequence across the scheduler, the block manager and the engine.
using SeqId = int64_t;

// Identity of a FULL block in the prefix cache: hash(parent block's hash, this block's token ids).
// The root (first block) uses parent_hash = 0. Injectable so tests can force collisions.
using BlockHashFn = uint64_t (*)(uint64_t parent_hash, absl::Span<const int32_t> tokens);

// The default BlockHashFn: a 64-bit multiply-fold (wyhash-style) hash over the parent hash and
// the token ids. Quality only affects the hit rate: every lookup also verifies the stored token
// ids and the parent's identity, so a collision can never share wrong KV.
uint64_t DefaultBlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens);

// Whole KV blocks of `bytes_per_block` that a budget of `budget_bytes` holds (capped at 2^30;
// 0 for a zero block size). The engine sizes its pool with it, and the server's start-up check
// (server/kv_fit.h) predicts that pool with it.
int64_t BlocksInBudget(int64_t budget_bytes, size_t bytes_per_block);

// Cumulative counters; the server exports them as Prometheus counters.
struct BlockManagerStats {
  // Prompt tokens (and eligible full blocks) looked up by successful AllocatePrompt calls with
  // use_cache and count_query: a sequence that skips the cache (prompt logprobs) made no lookup,
  // and the scheduler counts a sequence's first admission only, not its re-admissions after a
  // preemption (as vLLM V1's prefix-cache counters): those find mostly the sequence's own blocks
  // again, which would inflate the hit rate under memory pressure.
  int64_t prefix_cache_queries_tokens = 0;
  int64_t prefix_cache_queries_blocks = 0;
  // Of those, tokens (blocks) found in the cache, i.e. KV the engine did not have to compute.
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_hit_blocks = 0;
  // Cached blocks (ref count 0) whose content was dropped to reuse the block for something else.
  int64_t cached_block_evictions = 0;
};

// BlockManager owns num_blocks KV blocks of block_size tokens each, all existing from the start
// (ids 0..num_blocks-1), and a block table (vector of block ids) per sequence.
//
// Prefix caching: when a block is FULL and its KV computed (MarkComputed), it is registered under
// hash(parent hash, token ids). A later prompt with the same leading full blocks takes references
// on those blocks instead of recomputing them. Shared blocks are never written again: a sequence
// only writes positions >= its computed count, and only full computed blocks are ever shared.
// A cached block whose last reference goes away stays cached (and counts as free) until the block
// is needed for something else; free blocks are reused in eviction order (LRU).
//
// Collision safety: every cached block keeps its token ids and the unique id ("uid") of the exact
// parent content it was computed after. A lookup walks the chain from the root and accepts a block
// only if its tokens equal the prompt's and its parent uid equals the uid matched one step before.
// Uids are never reused, so by induction a hit block's KV was computed over exactly the prompt's
// prefix, whatever the hash function returns.
//
// Invariants (checked by CheckInvariants):
//   - ref_count(b) == number of block tables containing b; a table never holds a block twice.
//   - the free list holds exactly the blocks with ref_count 0, each once; blocks without a cache
//     entry come before cached ones (so cached blocks are evicted last, least recently freed
//     first).
//   - every hash-map entry points at a cached block whose stored key, tokens (block_size of them)
//     and parent hash reproduce the key; every cached block is in the map.
//
// Thread-safety: not thread-safe. Owned and driven by the single engine-loop thread (via the
// Scheduler). Const methods are safe to call concurrently only if no mutator runs.
class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
               BlockHashFn hash_fn = &DefaultBlockHash);

  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }

  // Blocks needed to hold num_tokens tokens (ceil division; 0 for num_tokens <= 0).
  int32_t BlocksNeeded(int32_t num_tokens) const;
  // Free blocks, including cached ones with no reference (they are evictable).
  int32_t num_free_blocks() const { return num_free_; }
  int32_t num_used_blocks() const { return num_blocks() - num_free_; }
  // Blocks that currently have a prefix-cache entry (referenced or not).
  int32_t num_cached_blocks() const { return static_cast<int32_t>(cache_.size()); }

  // Number of leading tokens of `tokens` whose KV AllocatePrompt would find in the cache right
  // now: whole blocks only, and never all of `tokens` (the last token is always computed so that
  // its logits exist). Read-only: changes no state and no stats.
  // use_cache = false: 0 (a sequence that must compute every position, e.g. for prompt logprobs).
  int32_t CachedPrefixLength(absl::Span<const int32_t> tokens, bool use_cache = true) const;

  // Creates the block table of `id`: references the longest cached prefix of full blocks of
  // `tokens` (as CachedPrefixLength) and allocates fresh blocks so the table covers
  // max(num_tokens_to_allocate, cached) tokens. Returns the number of cached tokens (the engine
  // skips computing them). All-or-nothing: ResourceExhausted (no change at all) if there are not
  // enough free blocks; AlreadyExists if `id` already has a table; InvalidArgument if `tokens` is
  // empty or num_tokens_to_allocate < 1.
  // use_cache = false: no cached prefix is referenced (all blocks fresh; the sequence's full
  // blocks are still registered for others once computed) and the stats count no query.
  // count_query = false: the lookup is left out of the stats' queries and hits.
  absl::StatusOr<int32_t> AllocatePrompt(SeqId id, absl::Span<const int32_t> tokens,
                                         int32_t num_tokens_to_allocate, bool use_cache = true,
                                         bool count_query = true);

  // Whether the table of `id` can grow to hold new_total_tokens (true if it already does).
  bool CanAppend(SeqId id, int32_t new_total_tokens) const;
  // Grows the table of `id` to hold new_total_tokens (never shrinks). NotFound for an unknown id,
  // ResourceExhausted (no change) if there are not enough free blocks.
  absl::Status Append(SeqId id, int32_t new_total_tokens);

  // Tells the cache that the KV of all_tokens[0, num_computed_tokens) of `id` is now computed:
  // every block that became full and computed is registered in the prefix cache. all_tokens is the
  // sequence's full token list (prompt + outputs). No-op with prefix caching off or unknown id.
  void MarkComputed(SeqId id, absl::Span<const int32_t> all_tokens, int32_t num_computed_tokens);

  // Gives back the blocks of `id`'s table past what `num_tokens` tokens need: those a step
  // allocated for speculative drafts that were rejected, which hold nothing but their KV (never
  // cached: only computed blocks are). They go to the head of the free list. No-op for an
  // unknown id or a table no longer than that.
  void Truncate(SeqId id, int32_t num_tokens);
  // Drops every reference `id` holds (finished, cancelled or preempted). Cached blocks that reach
  // ref 0 go to the tail of the free list (last block of the sequence first, since deeper blocks
  // are less likely to be shared), uncached ones to the head. No-op for an unknown id.
  void Free(SeqId id);

  bool Has(SeqId id) const { return seqs_.contains(id); }
  size_t num_seqs() const { return seqs_.size(); }
  // The block table of `id`; empty for an unknown id. Valid until the next mutating call.
  absl::Span<const int32_t> BlockTable(SeqId id) const;

  const BlockManagerStats& stats() const { return stats_; }

  // For tests and debugging.
  int32_t RefCount(int32_t block) const { return blocks_[block].ref_count; }
  bool IsCached(int32_t block) const { return blocks_[block].cached; }
  // Free blocks in the order they would be reused (head first).
  std::vector<int32_t> FreeListInEvictionOrder() const;
  absl::Status CheckInvariants() const;

 private:
  static constexpr int32_t kNil = -1;

  struct Block {
    int32_t ref_count = 0;
    // Intrusive doubly-linked free list (O(1) removal when a free cached block gets a hit).
    int32_t prev = kNil;
    int32_t next = kNil;
    bool in_free_list = false;
    // Prefix-cache entry; valid iff cached.
    bool cached = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    uint64_t uid = 0;         // unique per registration, never reused
    uint64_t parent_uid = 0;  // 0 for the root block
    std::vector<int32_t> tokens;
  };

  struct SeqBlocks {
    std::vector<int32_t> table;
    // Identity of the content of the first chain_hash.size() blocks (all full and computed):
    // hash chain and content uid per block. The uid of block i is the uid of a cached block with
    // identical content chain (this sequence's own block, or the one it duplicates).
    std::vector<uint64_t> chain_hash;
    std::vector<uint64_t> chain_uid;
  };

  struct PrefixMatch {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;
  };

  // Longest verified chain of cached full blocks covering at most max_blocks blocks.
  PrefixMatch MatchPrefix(absl::Span<const int32_t> tokens, int32_t max_blocks) const;
  int32_t MaxMatchableBlocks(int32_t num_tokens) const;

  void PushFront(int32_t b);
  // Drops one reference to block b; at zero it joins the free list (Free's order rules).
  void Unreference(int32_t b);
  void PushBack(int32_t b);
  void Unlink(int32_t b);
  // Pops the head of the free list, dropping its cache entry if any; takes one reference.
  int32_t AllocateFreshBlock();
  void DropCacheEntry(int32_t b);
  // A cached block whose parent (by uid) is no longer cached: no prefix match can reach it.
  bool IsOrphan(int32_t b) const;

  const int32_t block_size_;
  const bool enable_prefix_caching_;
  const BlockHashFn hash_fn_;

  std::vector<Block> blocks_;
  int32_t free_head_ = kNil;
  int32_t free_tail_ = kNil;
  int32_t num_free_ = 0;

  absl::flat_hash_map<uint64_t, int32_t> cache_;  // hash -> block id
  absl::flat_hash_map<SeqId, SeqBlocks> seqs_;
  uint64_t next_uid_ = 1;
  BlockManagerStats stats_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SCHEDULER_BLOCK_MANAGER_H_
