#include "engine/scheduler/block_manager.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Tokens base, base+1, ... (n of them): distinct prompts for distinct bases.
std::vector<int32_t> Range(int32_t base, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), base);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> Table(const BlockManager& bm, SeqId id) {
  auto t = bm.BlockTable(id);
  return {t.begin(), t.end()};
}

#define EXPECT_INVARIANTS(bm) EXPECT_TRUE((bm).CheckInvariants().ok()) << (bm).CheckInvariants()

// Allocates a whole prompt and marks it computed, as a finished prefill would.
void Prefill(BlockManager& bm, SeqId id, const std::vector<int32_t>& tokens, int32_t expected_hit) {
  absl::StatusOr<int32_t> hit = bm.AllocatePrompt(id, tokens, static_cast<int32_t>(tokens.size()));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(*hit, expected_hit);
  EXPECT_INVARIANTS(bm);
  bm.MarkComputed(id, tokens, static_cast<int32_t>(tokens.size()));
  EXPECT_INVARIANTS(bm);
}

TEST(BlockManagerTest, BlocksNeededRoundsUp) {
  BlockManager bm(8, 16, true);
  EXPECT_EQ(bm.BlocksNeeded(0), 0);
  EXPECT_EQ(bm.BlocksNeeded(1), 1);
  EXPECT_EQ(bm.BlocksNeeded(16), 1);
  EXPECT_EQ(bm.BlocksNeeded(17), 2);
  EXPECT_EQ(bm.BlocksNeeded(128), 8);
  EXPECT_EQ(bm.num_free_blocks(), 8);
  EXPECT_EQ(bm.num_used_blocks(), 0);
  EXPECT_INVARIANTS(bm);
}

TEST(BlockManagerTest, AllocateAppendFree) {
  BlockManager bm(8, 4, true);
  ASSERT_EQ(*bm.AllocatePrompt(1, Range(0, 5), 5), 0);
  EXPECT_THAT(Table(bm, 1), ElementsAre(0, 1));
  EXPECT_EQ(bm.num_used_blocks(), 2);
  EXPECT_INVARIANTS(bm);

  EXPECT_TRUE(bm.CanAppend(1, 8));  // still fits in two blocks
  ASSERT_TRUE(bm.Append(1, 8).ok());
  EXPECT_EQ(bm.num_used_blocks(), 2);
  ASSERT_TRUE(bm.Append(1, 9).ok());
  EXPECT_THAT(Table(bm, 1), ElementsAre(0, 1, 2));
  EXPECT_INVARIANTS(bm);

  ASSERT_EQ(*bm.AllocatePrompt(2, Range(100, 20), 20), 0);
  EXPECT_THAT(Table(bm, 2), ElementsAre(3, 4, 5, 6, 7));
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_FALSE(bm.CanAppend(1, 13));
  EXPECT_EQ(bm.Append(1, 13).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Table(bm, 1), ElementsAre(0, 1, 2));
  EXPECT_INVARIANTS(bm);

  bm.Free(2);
  EXPECT_EQ(bm.num_free_blocks(), 5);
  EXPECT_TRUE(bm.BlockTable(2).empty());
  EXPECT_FALSE(bm.Has(2));
  bm.Free(1);
  bm.Free(1);  // unknown now: no-op
  EXPECT_EQ(bm.num_free_blocks(), 8);
  EXPECT_INVARIANTS(bm);
}

TEST(BlockManagerTest, AllocatePromptErrors) {
  BlockManager bm(4, 4, true);
  EXPECT_EQ(bm.AllocatePrompt(1, {}, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.AllocatePrompt(1, Range(0, 4), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(bm.AllocatePrompt(1, Range(0, 4), 4).ok());
  EXPECT_EQ(bm.AllocatePrompt(1, Range(0, 4), 4).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bm.Append(7, 4).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(bm.CanAppend(7, 1));
  EXPECT_INVARIANTS(bm);
}

TEST(BlockManagerTest, AllocatePromptIsAllOrNothing) {
  BlockManager bm(4, 4, true);
  ASSERT_TRUE(bm.AllocatePrompt(1, Range(0, 8), 8).ok());
  absl::StatusOr<int32_t> r = bm.AllocatePrompt(2, Range(100, 12), 12);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("needs 3 free KV blocks, 2 available"));
  EXPECT_FALSE(bm.Has(2));
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_EQ(bm.stats().prefix_cache_queries_tokens, 8);  // failed attempts are not counted
  EXPECT_INVARIANTS(bm);
  // A partial allocation (first chunk of a chunked prefill) fits.
  ASSERT_TRUE(bm.AllocatePrompt(2, Range(100, 12), 8).ok());
  EXPECT_EQ(Table(bm, 2).size(), 2u);
  EXPECT_INVARIANTS(bm);
}

// Two prompts with a shared 40-token prefix at block_size 16 share two full blocks.
TEST(BlockManagerTest, SharedPrefixSharesFullBlocks) {
  BlockManager bm(16, 16, true);
  const std::vector<int32_t> prefix = Range(1000, 40);
  const std::vector<int32_t> a = Concat(prefix, Range(1, 4));
  const std::vector<int32_t> b = Concat(prefix, Range(500, 6));
  Prefill(bm, 1, a, 0);
  EXPECT_EQ(bm.num_cached_blocks(), 2);  // 44 tokens: 2 full blocks + a partial one

  EXPECT_EQ(bm.CachedPrefixLength(b), 32);
  Prefill(bm, 2, b, 32);
  const std::vector<int32_t> ta = Table(bm, 1), tb = Table(bm, 2);
  ASSERT_EQ(tb.size(), 3u);
  EXPECT_EQ(tb[0], ta[0]);
  EXPECT_EQ(tb[1], ta[1]);
  EXPECT_NE(tb[2], ta[2]);
  EXPECT_EQ(bm.RefCount(ta[0]), 2);
  EXPECT_EQ(bm.RefCount(ta[1]), 2);
  EXPECT_EQ(bm.RefCount(ta[2]), 1);
  EXPECT_EQ(bm.num_used_blocks(), 4);
  EXPECT_EQ(bm.stats().prefix_cache_queries_tokens, 44 + 46);
  EXPECT_EQ(bm.stats().prefix_cache_queries_blocks, 2 + 2);
  EXPECT_EQ(bm.stats().prefix_cache_hit_tokens, 32);
  EXPECT_EQ(bm.stats().prefix_cache_hit_blocks, 2);

  // Shared blocks stay in use until both sequences are gone.
  bm.Free(1);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.RefCount(ta[0]), 1);
  EXPECT_EQ(bm.num_used_blocks(), 3);
  bm.Free(2);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.num_used_blocks(), 0);
  // Still cached while free: a third prompt hits them.
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  Prefill(bm, 3, Concat(prefix, Range(7, 1)), 32);
}

TEST(BlockManagerTest, NeverCachesTheWholePrompt) {
  BlockManager bm(8, 16, true);
  const std::vector<int32_t> p = Range(0, 32);
  Prefill(bm, 1, p, 0);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  // Identical 32-token prompt: only the first block may be reused, the last token is computed.
  EXPECT_EQ(bm.CachedPrefixLength(p), 16);
  Prefill(bm, 2, p, 16);
  EXPECT_NE(Table(bm, 1)[1], Table(bm, 2)[1]);
  EXPECT_EQ(bm.CachedPrefixLength(Range(0, 33)), 32);
  EXPECT_EQ(bm.CachedPrefixLength(Range(0, 1)), 0);
}

TEST(BlockManagerTest, OnlyComputedFullBlocksAreCached) {
  BlockManager bm(8, 4, true);
  const std::vector<int32_t> p = Range(0, 10);
  ASSERT_TRUE(bm.AllocatePrompt(1, p, 10).ok());
  bm.MarkComputed(1, p, 3);  // nothing full yet
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  bm.MarkComputed(1, p, 7);  // block 0 full
  EXPECT_EQ(bm.num_cached_blocks(), 1);
  bm.MarkComputed(1, p, 10);  // block 1 full, block 2 partial
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  EXPECT_INVARIANTS(bm);
  // Decode grows the sequence; its output tokens fill block 2 and get cached too.
  std::vector<int32_t> all = Concat(p, {77, 78});
  ASSERT_TRUE(bm.Append(1, 12).ok());
  bm.MarkComputed(1, all, 12);
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.CachedPrefixLength(Concat(all, {1})), 12);
}

// The hit-rate counters count only the lookups made, and counted: a sequence that skips the cache
// (prompt logprobs) is no query, though its blocks are cached for others.
TEST(BlockManagerTest, OnlyLookupsAreQueries) {
  BlockManager bm(8, 4, true);
  const std::vector<int32_t> p = Range(0, 9);
  ASSERT_TRUE(bm.AllocatePrompt(1, p, 9, /*use_cache=*/false).ok());
  bm.MarkComputed(1, p, 9);
  EXPECT_EQ(bm.stats().prefix_cache_queries_tokens, 0);
  EXPECT_EQ(bm.stats().prefix_cache_queries_blocks, 0);
  Prefill(bm, 2, p, 8);
  EXPECT_EQ(bm.stats().prefix_cache_queries_tokens, 9);
  EXPECT_EQ(bm.stats().prefix_cache_queries_blocks, 2);
  EXPECT_EQ(bm.stats().prefix_cache_hit_tokens, 8);
  // A lookup the caller does not count (the scheduler's re-admissions after a preemption).
  absl::StatusOr<int32_t> hit = bm.AllocatePrompt(3, p, 9, /*use_cache=*/true,
                                                  /*count_query=*/false);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(*hit, 8);
  EXPECT_EQ(bm.stats().prefix_cache_queries_tokens, 9);
  EXPECT_EQ(bm.stats().prefix_cache_hit_tokens, 8);
  EXPECT_INVARIANTS(bm);
}

TEST(BlockManagerTest, PrefixCachingDisabled) {
  BlockManager bm(8, 4, false);
  Prefill(bm, 1, Range(0, 12), 0);
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  Prefill(bm, 2, Range(0, 12), 0);
  EXPECT_EQ(bm.stats().prefix_cache_queries_tokens, 0);
  bm.Free(1);
  bm.Free(2);
  EXPECT_INVARIANTS(bm);
}

// Free list order: uncached blocks are reused first; cached ones least recently freed first,
// and within a sequence its last block first (deeper blocks are shared less often).
TEST(BlockManagerTest, EvictionIsLru) {
  BlockManager bm(8, 4, true);
  const std::vector<int32_t> a = Range(100, 9);  // 2 full blocks + 1 partial
  const std::vector<int32_t> b = Range(200, 9);
  Prefill(bm, 1, a, 0);
  Prefill(bm, 2, b, 0);
  const std::vector<int32_t> ta = Table(bm, 1), tb = Table(bm, 2);  // {0,1,2}, {3,4,5}
  ASSERT_THAT(ta, ElementsAre(0, 1, 2));
  ASSERT_THAT(tb, ElementsAre(3, 4, 5));
  bm.Free(1);
  bm.Free(2);
  EXPECT_INVARIANTS(bm);
  // Uncached partial blocks 5, 2 at the head, then the never-used 6, 7, then cached blocks:
  // a's (freed first) last block first, then b's.
  EXPECT_THAT(bm.FreeListInEvictionOrder(), ElementsAre(5, 2, 6, 7, 1, 0, 4, 3));

  // Reusing a's blocks in full drops their cache entries, b's stay.
  ASSERT_TRUE(bm.AllocatePrompt(3, Range(900, 24), 24).ok());
  EXPECT_THAT(Table(bm, 3), ElementsAre(5, 2, 6, 7, 1, 0));
  EXPECT_EQ(bm.stats().cached_block_evictions, 2);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  EXPECT_EQ(bm.CachedPrefixLength(a), 0);
  EXPECT_EQ(bm.CachedPrefixLength(b), 8);
  EXPECT_INVARIANTS(bm);

  // A hit takes a cached block out of the middle of the free list; on release it becomes the
  // most recently used.
  ASSERT_EQ(*bm.AllocatePrompt(4, b, 8), 8);
  EXPECT_THAT(Table(bm, 4), ElementsAre(3, 4));
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_INVARIANTS(bm);
  bm.Free(4);
  EXPECT_INVARIANTS(bm);
  EXPECT_THAT(bm.FreeListInEvictionOrder(), ElementsAre(4, 3));
}

TEST(BlockManagerTest, RefCountedBlocksAreNeverEvicted) {
  BlockManager bm(4, 4, true);
  Prefill(bm, 1, Range(0, 8), 0);  // both blocks full, cached, held
  ASSERT_TRUE(bm.AllocatePrompt(2, Range(50, 8), 8).ok());
  EXPECT_EQ(bm.AllocatePrompt(3, Range(80, 1), 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bm.stats().cached_block_evictions, 0);
  EXPECT_EQ(bm.CachedPrefixLength(Range(0, 9)), 8);
  EXPECT_INVARIANTS(bm);
}

// Every block hashes to the same key: nothing may be shared except the truly identical content.
uint64_t ConstantHash(uint64_t, absl::Span<const int32_t>) { return 42; }

TEST(BlockManagerTest, ConstantHashNeverSharesWrongKv) {
  BlockManager bm(16, 4, true, &ConstantHash);
  Prefill(bm, 1, Range(0, 12), 0);
  EXPECT_EQ(bm.num_cached_blocks(), 1);  // only one key exists
  // Different content under the same key: a miss.
  Prefill(bm, 2, Range(100, 12), 0);
  EXPECT_EQ(bm.CachedPrefixLength(Range(100, 12)), 0);
  // Identical content: the first block hits; the second's key is taken by block 0, whose parent
  // and tokens differ, so it is a miss too.
  Prefill(bm, 3, Range(0, 12), 4);
  EXPECT_EQ(bm.stats().prefix_cache_hit_blocks, 1);
  EXPECT_INVARIANTS(bm);
}

// Ignores the parent: [X, Y] and [Z, Y] give Y the same key. Only the parent-uid check stops
// Y's KV (computed after X) being used after Z.
uint64_t ParentBlindHash(uint64_t, absl::Span<const int32_t> tokens) {
  return DefaultBlockHash(0, tokens);
}

TEST(BlockManagerTest, ParentBlindHashNeverSharesWrongKv) {
  BlockManager bm(16, 4, true, &ParentBlindHash);
  const std::vector<int32_t> x = Range(0, 4), y = Range(10, 4), z = Range(20, 4);
  Prefill(bm, 1, Concat(Concat(x, y), {99}), 0);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  EXPECT_EQ(bm.CachedPrefixLength(Concat(Concat(z, y), {99})), 0);
  Prefill(bm, 2, Concat(Concat(z, y), {99}), 0);
  EXPECT_EQ(bm.CachedPrefixLength(Concat(Concat(x, y), {5})), 8);
  // Y after Z is never findable (its key belongs to Y after X).
  EXPECT_EQ(bm.CachedPrefixLength(Concat(Concat(z, y), {5})), 4);
  bm.Free(1);
  bm.Free(2);
  EXPECT_INVARIANTS(bm);
}

TEST(BlockManagerTest, StaleChildOfEvictedParentNeverHits) {
  // Blocks of 2 tokens. A = [1,2][3,4][5] caches [1,2] and [3,4] (after [1,2]).
  BlockManager bm(4, 2, true, &ParentBlindHash);
  Prefill(bm, 1, {1, 2, 3, 4, 5}, 0);
  bm.Free(1);
  ASSERT_THAT(bm.FreeListInEvictionOrder(), ElementsAre(2, 3, 1, 0));
  // Takes blocks 2, 3, 1: evicts [3,4], keeps [1,2] in block 0.
  ASSERT_TRUE(bm.AllocatePrompt(2, {8, 8, 8, 8, 8, 8}, 6).ok());
  EXPECT_EQ(bm.stats().cached_block_evictions, 1);
  bm.Free(2);
  // B = [7,7][3,4][6] caches [3,4] again, now after [7,7], under the same (parent-blind) key.
  Prefill(bm, 3, {7, 7, 3, 4, 6}, 0);
  bm.Free(3);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  // [1,2] still hits; [3,4] is only cached after [7,7]: a miss after [1,2].
  EXPECT_EQ(bm.CachedPrefixLength({1, 2, 3, 4, 0}), 2);
  EXPECT_EQ(bm.CachedPrefixLength({7, 7, 3, 4, 0}), 4);
}

// Two sequences prefill the same prompt at the same time: the second's blocks stay private, but
// its later blocks still chain on the cached twin and are found by a third prompt.
TEST(BlockManagerTest, ConcurrentDuplicatePrefixChainsOnTwin) {
  BlockManager bm(16, 4, true);
  const std::vector<int32_t> p = Range(0, 9);
  ASSERT_EQ(*bm.AllocatePrompt(1, p, 9), 0);
  ASSERT_EQ(*bm.AllocatePrompt(2, p, 9), 0);
  bm.MarkComputed(1, p, 9);
  bm.MarkComputed(2, p, 9);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.num_cached_blocks(), 2);  // sequence 1's
  EXPECT_FALSE(bm.IsCached(Table(bm, 2)[0]));
  // Sequence 2 decodes on; its block 2 fills and is cached after sequence 1's block 1.
  const std::vector<int32_t> p2 = Concat(p, {50, 51, 52});
  bm.MarkComputed(2, p2, 12);
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  EXPECT_INVARIANTS(bm);
  const std::vector<int32_t> q = Concat(p2, {60});
  Prefill(bm, 3, q, 12);
  const std::vector<int32_t> t1 = Table(bm, 1), t2 = Table(bm, 2), t3 = Table(bm, 3);
  EXPECT_EQ(t3[0], t1[0]);
  EXPECT_EQ(t3[1], t1[1]);
  EXPECT_EQ(t3[2], t2[2]);
  bm.Free(1);
  bm.Free(2);
  bm.Free(3);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.num_free_blocks(), 16);
}

// A block cached on a concurrent twin's chain outlives the twin: once the twin's blocks are
// evicted it is an orphan no prompt reaches. The next sequence to compute the same content
// caches its own in the orphan's place, so its whole chain stays findable.
TEST(BlockManagerTest, AnOrphanedBlockGivesWayToTheSameContentRecomputed) {
  BlockManager bm(12, 2, true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5};      // blocks [1,2][3,4]
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7};  // and [5,6] after them
  ASSERT_EQ(*bm.AllocatePrompt(1, a, 5), 0);
  ASSERT_EQ(*bm.AllocatePrompt(2, b, 7), 0);  // concurrently: no hits yet
  bm.MarkComputed(1, a, 5);
  bm.MarkComputed(2, b, 7);  // [1,2][3,4] private twins; [5,6] cached on sequence 1's chain
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  bm.Free(1);
  // Evict sequence 1's cached blocks (the least recently used): [5,6] is orphaned.
  ASSERT_TRUE(bm.AllocatePrompt(3, Range(100, 16), 16).ok());
  bm.Free(2);
  bm.Free(3);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.CachedPrefixLength(Concat(b, {9})), 0);
  // Recomputed, the whole prefix is cached again, [5,6] included.
  Prefill(bm, 4, Concat(b, {9}), 0);
  bm.Free(4);
  EXPECT_INVARIANTS(bm);
  EXPECT_EQ(bm.CachedPrefixLength(Concat(b, {9})), 6);
}

TEST(BlockManagerTest, DefaultHashDependsOnParentAndEveryToken) {
  const std::vector<int32_t> t = Range(0, 16);
  const uint64_t h = DefaultBlockHash(0, t);
  EXPECT_NE(h, DefaultBlockHash(1, t));
  for (size_t i = 0; i < t.size(); ++i) {
    std::vector<int32_t> u = t;
    ++u[i];
    EXPECT_NE(h, DefaultBlockHash(0, u)) << i;
  }
  EXPECT_NE(DefaultBlockHash(0, Range(0, 3)), DefaultBlockHash(0, Range(0, 4)));
  EXPECT_NE(DefaultBlockHash(0, {0}), DefaultBlockHash(0, {0, 0}));
}

TEST(BlocksInBudgetTest, WholeBlocksCapped) {
  EXPECT_EQ(BlocksInBudget(1000, 300), 3);
  EXPECT_EQ(BlocksInBudget(299, 300), 0);
  EXPECT_EQ(BlocksInBudget(1000, 0), 0);
  EXPECT_EQ(BlocksInBudget(-5, 300), 0);
  EXPECT_EQ(BlocksInBudget(int64_t{1} << 62, 1), int64_t{1} << 30);
}

}  // namespace
}  // namespace blossom
