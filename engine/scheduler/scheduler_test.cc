// Table-driven scheduler tests: each test steps through engine iterations with a fake model and
// asserts the exact plan of every step.
#include "engine/scheduler/scheduler.h"

#include <map>
#include <memory>
#include <ostream>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr bool P = true;   // is_prefill
constexpr bool D = false;  // decode
constexpr bool S = true;   // sample
constexpr bool N = false;  // no sample

// The expected form of one plan entry.
struct Want {
  SeqId id;
  int32_t num_computed;
  int32_t num_new;
  bool is_prefill;
  bool sample;
  bool operator==(const Want& o) const {
    return std::tie(id, num_computed, num_new, is_prefill, sample) ==
           std::tie(o.id, o.num_computed, o.num_new, o.is_prefill, o.sample);
  }
};

std::ostream& operator<<(std::ostream& os, const Want& w) {
  return os << "{" << w.id << ", " << w.num_computed << ", " << w.num_new << ", "
            << (w.is_prefill ? "P" : "D") << ", " << (w.sample ? "S" : "N") << "}";
}

SchedulerConfig SmallConfig() {
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_total_tokens = 512;
  c.block_size = 16;
  c.num_blocks = 64;
  return c;
}

// Drives a Scheduler like the engine loop does, with a fake model whose token at step s for
// sequence id is (id * 31 + s) % 1000; a sequence finishes when it has max_new_tokens outputs.
class Driver {
 public:
  explicit Driver(const SchedulerConfig& config) {
    auto s = Scheduler::Create(config);
    EXPECT_TRUE(s.ok()) << s.status();
    sched_ = std::move(*s);
  }

  Scheduler& sched() { return *sched_; }
  int step() const { return step_; }
  const std::vector<int32_t>& outputs(SeqId id) { return outputs_[id]; }

  // Prompt tokens id*1000 + i unless given.
  void Add(SeqId id, int32_t prompt_len, int32_t max_new, int32_t priority = 0) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < prompt_len; ++i) prompt.push_back(static_cast<int32_t>(id * 1000 + i));
    AddTokens(id, prompt, max_new, priority);
  }
  void AddTokens(SeqId id, const std::vector<int32_t>& prompt, int32_t max_new,
                 int32_t priority = 0, int32_t max_chunk_tokens = 0) {
    SequenceSpec spec{id, prompt, max_new, priority};
    spec.max_chunk_tokens = max_chunk_tokens;
    absl::Status st = sched_->AddRequest(spec);
    ASSERT_TRUE(st.ok()) << st;
    max_new_[id] = max_new;
    ASSERT_TRUE(sched_->CheckInvariants().ok()) << sched_->CheckInvariants();
  }

  // One engine step: Schedule, compare the plan with `want`, sample, Update.
  StepPlan Step(const std::vector<Want>& want, const std::vector<SeqId>& want_preempted = {}) {
    ++step_;
    StepPlan plan = sched_->Schedule();
    EXPECT_TRUE(sched_->CheckInvariants().ok()) << sched_->CheckInvariants();
    std::vector<Want> got;
    for (const ScheduledSeq& e : plan.seqs) {
      got.push_back({e.id, e.num_computed, e.num_new, e.is_prefill, e.sample});
      // The table must cover every position written this step.
      EXPECT_GE(static_cast<int64_t>(e.block_table.size()) * sched_->config().block_size,
                e.num_computed + e.num_new);
    }
    EXPECT_THAT(got, ElementsAreArray(want)) << "step " << step_;
    EXPECT_THAT(plan.preempted, ElementsAreArray(want_preempted)) << "step " << step_;
    std::vector<SeqOutput> outs;
    for (const ScheduledSeq& e : plan.seqs) {
      if (!e.sample) continue;
      const int32_t token = static_cast<int32_t>((e.id * 31 + step_) % 1000);
      outputs_[e.id].push_back(token);
      outs.push_back({e.id, token, outputs_[e.id].size() >= static_cast<size_t>(max_new_[e.id])});
    }
    absl::Status st = sched_->Update(plan, outs);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_TRUE(sched_->CheckInvariants().ok()) << sched_->CheckInvariants();
    return plan;
  }

 private:
  std::unique_ptr<Scheduler> sched_;
  int step_ = 0;
  std::map<SeqId, int32_t> max_new_;
  std::map<SeqId, std::vector<int32_t>> outputs_;
};

std::vector<int32_t> Tokens(Scheduler& s, SeqId id) {
  auto t = s.Tokens(id);
  return {t.begin(), t.end()};
}

TEST(SchedulerTest, ChunkedPrefillSplitsLongPromptUnderTokenBudget) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 32;
  Driver d(c);
  d.Add(1, 80, 3);
  StepPlan p = d.Step({{1, 0, 32, P, N}});
  EXPECT_EQ(p.num_prefill_tokens, 32);
  EXPECT_EQ(p.seqs[0].block_table.size(), 2u);
  d.Step({{1, 32, 32, P, N}});
  d.Step({{1, 64, 16, P, S}});
  p = d.Step({{1, 80, 1, D, S}});
  EXPECT_EQ(p.num_decode_tokens, 1);
  EXPECT_EQ(p.num_prefill_tokens, 0);
  d.Step({{1, 81, 1, D, S}});
  EXPECT_FALSE(d.sched().HasWork());
  EXPECT_EQ(d.sched().stats().blocks_used, 0);
  EXPECT_THAT(d.outputs(1), ElementsAre((31 + 3) % 1000, (31 + 4), (31 + 5)));
}

// A sequence with its own chunk cap (prompt logprobs: bounded logit rows per step) takes at most
// that many prompt tokens a step; others in the same step still use the rest of the budget.
TEST(SchedulerTest, PerSequenceChunkCapBoundsItsPrefillSteps) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 32;
  Driver d(c);
  d.AddTokens(1, std::vector<int32_t>(30, 7), 2, 0, /*max_chunk_tokens=*/12);
  d.Add(2, 10, 1);
  d.Step({{1, 0, 12, P, N}, {2, 0, 10, P, S}});
  d.Step({{1, 12, 12, P, N}});
  d.Step({{1, 24, 6, P, S}});
  d.Step({{1, 30, 1, D, S}});
  EXPECT_FALSE(d.sched().HasWork());
  // The cap is per step, shared by every capped sequence; uncapped ones and decodes are not
  // counted against it.
  Driver shared(c);
  shared.AddTokens(1, std::vector<int32_t>(10, 7), 2, 0, /*max_chunk_tokens=*/8);
  shared.AddTokens(2, std::vector<int32_t>(10, 8), 2, 0, /*max_chunk_tokens=*/8);
  shared.Add(3, 5, 2);
  shared.Step({{1, 0, 8, P, N}, {3, 0, 5, P, S}});           // 2 waits: 8 capped rows used
  shared.Step({{1, 8, 2, P, S}, {3, 5, 1, D, S}, {2, 0, 6, P, N}});
  shared.Step({{1, 10, 1, D, S}, {2, 6, 4, P, S}});
  // Once its prompt rows are not wanted any more, a sequence is not capped (PromptRowsDone).
  Driver cleared(c);
  cleared.AddTokens(1, std::vector<int32_t>(20, 7), 2, 0, /*max_chunk_tokens=*/8);
  cleared.Step({{1, 0, 8, P, N}});
  cleared.sched().PromptRowsDone(1);
  cleared.Step({{1, 8, 12, P, S}});
  // Without chunked prefill the cap cannot apply: the prefill runs in one step.
  c.enable_chunked_prefill = false;
  Driver whole(c);
  whole.AddTokens(1, std::vector<int32_t>(30, 7), 2, 0, /*max_chunk_tokens=*/12);
  whole.Step({{1, 0, 30, P, S}});
}

// Once its prompt rows are all scored, a prompt-logprobs sequence (skip_prefix_cache) is an
// ordinary one: re-admitted after a preemption, it reuses its own cached blocks. Re-admissions
// are not prefix-cache queries in the stats (as vLLM's), nor are lookups skipped.
TEST(SchedulerTest, AfterItsPromptRowsASequenceUsesThePrefixCache) {
  SchedulerConfig c = SmallConfig();
  c.block_size = 4;
  c.num_blocks = 8;
  c.max_total_tokens = 24;
  auto s = std::move(*Scheduler::Create(c));
  SequenceSpec rows{1, {1, 2, 3, 4, 5, 6, 7, 8}, 8, /*priority=*/1};
  rows.skip_prefix_cache = true;
  rows.max_chunk_tokens = 8;
  ASSERT_TRUE(s->AddRequest(rows).ok());
  ASSERT_TRUE(s->AddRequest({2, std::vector<int32_t>(12, 5), 12, 0}).ok());
  bool preempted = false;
  int32_t readmitted_cached = -1;
  for (int step = 0; step < 40 && readmitted_cached < 0 && s->HasWork(); ++step) {
    const StepPlan plan = s->Schedule();
    std::vector<SeqOutput> outs;
    for (const ScheduledSeq& e : plan.seqs) {
      if (e.id == 1 && preempted && e.is_prefill && e.num_computed == e.num_cached) {
        readmitted_cached = e.num_cached;
      }
      if (!e.sample) continue;
      outs.push_back({e.id, 42, s->NumOutputTokens(e.id) + 1 >= (e.id == 1 ? 8 : 12)});
    }
    for (SeqId id : plan.preempted) preempted |= id == 1;
    ASSERT_TRUE(s->Update(plan, outs).ok());
    // The engine's call once every prompt row is scored (here: the first step's chunk).
    if (step == 0) s->PromptRowsDone(1);
    ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  }
  ASSERT_TRUE(preempted) << "the pool was meant to be too small";
  EXPECT_GT(readmitted_cached, 0);
  // Only sequence 2's first admission was a lookup.
  EXPECT_EQ(s->stats().prefix_cache_queries_tokens, 12);
}

TEST(SchedulerTest, DecodeAndPrefillMix) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 32;
  Driver d(c);
  d.Add(1, 20, 5);
  d.Step({{1, 0, 20, P, S}});
  d.Add(2, 50, 2);
  // Running decode first, the new prompt gets the rest of the budget.
  StepPlan p = d.Step({{1, 20, 1, D, S}, {2, 0, 31, P, N}});
  EXPECT_EQ(p.num_prefill_tokens, 31);
  EXPECT_EQ(p.num_decode_tokens, 1);
  d.Step({{1, 21, 1, D, S}, {2, 31, 19, P, S}});
  d.Step({{1, 22, 1, D, S}, {2, 50, 1, D, S}});
  EXPECT_FALSE(d.sched().Contains(2));
  d.Step({{1, 23, 1, D, S}});
  EXPECT_FALSE(d.sched().HasWork());
}

TEST(SchedulerTest, WithoutChunkingTheHeadOfTheQueueWaitsAndBlocksOthers) {
  SchedulerConfig c = SmallConfig();
  c.enable_chunked_prefill = false;
  c.max_num_batched_tokens = 64;
  Driver d(c);
  d.Add(1, 50, 4);
  d.Add(2, 20, 2);
  d.Add(3, 5, 2);
  // 14 tokens left after request 1: request 2 does not fit and request 3 may not pass it.
  d.Step({{1, 0, 50, P, S}});
  d.Step({{1, 50, 1, D, S}, {2, 0, 20, P, S}, {3, 0, 5, P, S}});
  d.Step({{1, 51, 1, D, S}, {2, 20, 1, D, S}, {3, 5, 1, D, S}});
  d.Step({{1, 52, 1, D, S}});
  EXPECT_FALSE(d.sched().HasWork());
}

TEST(SchedulerTest, MaxNumSeqs) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 2;
  Driver d(c);
  d.Add(1, 4, 2);
  d.Add(2, 4, 2);
  d.Add(3, 4, 2);
  d.Step({{1, 0, 4, P, S}, {2, 0, 4, P, S}});
  EXPECT_EQ(d.sched().num_running(), 2u);
  EXPECT_EQ(d.sched().num_waiting(), 1u);
  d.Step({{1, 4, 1, D, S}, {2, 4, 1, D, S}});
  d.Step({{3, 0, 4, P, S}});
  d.Step({{3, 4, 1, D, S}});
  EXPECT_FALSE(d.sched().HasWork());
}

TEST(SchedulerTest, LowerPriorityValueRunsFirstThenArrivalOrder) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 1;
  Driver d(c);
  d.Add(1, 4, 1, /*priority=*/1);
  d.Add(2, 4, 1, 0);
  d.Add(3, 4, 1, 1);
  d.Add(4, 4, 1, 0);
  d.Step({{2, 0, 4, P, S}});
  d.Step({{4, 0, 4, P, S}});
  d.Step({{1, 0, 4, P, S}});
  d.Step({{3, 0, 4, P, S}});
  EXPECT_FALSE(d.sched().HasWork());
}

// Blocks run out: the newest running sequence is preempted (recompute), comes back first,
// ahead of a request that was already waiting, and recomputes its prompt + earlier outputs.
TEST(SchedulerTest, PreemptsNewestAndRecomputesIt) {
  SchedulerConfig c = SmallConfig();
  c.block_size = 4;
  c.num_blocks = 6;
  c.max_num_seqs = 2;
  c.max_total_tokens = 24;
  c.enable_prefix_caching = false;
  Driver d(c);
  d.Add(1, 8, 12);
  d.Add(2, 8, 8);
  d.Add(3, 4, 1);  // waits: max_num_seqs
  d.Step({{1, 0, 8, P, S}, {2, 0, 8, P, S}});
  for (int32_t k = 8; k < 12; ++k) d.Step({{1, k, 1, D, S}, {2, k, 1, D, S}});
  EXPECT_EQ(d.sched().stats().blocks_used, 6);
  // Sequence 1 needs a 4th block at position 12: sequence 2 (newest) gives its 3 back.
  StepPlan p = d.Step({{1, 12, 1, D, S}}, /*want_preempted=*/{2});
  EXPECT_FALSE(d.sched().IsRunning(2));
  EXPECT_EQ(d.sched().stats().num_preemptions, 1);
  EXPECT_EQ(d.outputs(2).size(), 5u);
  // Its prompt + 5 outputs (13 tokens, 4 blocks) do not fit next to sequence 1: it waits, and
  // sequence 3 behind it may not pass.
  for (int32_t k = 13; k < 19; ++k) d.Step({{1, k, 1, D, S}});
  EXPECT_FALSE(d.sched().Contains(1));
  std::vector<int32_t> expected_tokens;
  for (int32_t i = 0; i < 8; ++i) expected_tokens.push_back(2000 + i);
  for (int32_t t : d.outputs(2)) expected_tokens.push_back(t);
  EXPECT_EQ(Tokens(d.sched(), 2), expected_tokens);
  // Back first, from scratch (num_computed 0), all 13 tokens as its prefill.
  d.Step({{2, 0, 13, P, S}, {3, 0, 4, P, S}});
  d.Step({{2, 13, 1, D, S}});
  d.Step({{2, 14, 1, D, S}});
  EXPECT_EQ(d.outputs(2).size(), 8u);
  EXPECT_FALSE(d.sched().HasWork());
  EXPECT_EQ(d.sched().stats().blocks_used, 0);
}

// The victim is the lowest-priority running sequence even if it is older, and a sequence may
// have to preempt itself.
TEST(SchedulerTest, PreemptsLowestPriorityEvenItself) {
  SchedulerConfig c = SmallConfig();
  c.block_size = 4;
  c.num_blocks = 4;
  c.max_total_tokens = 16;
  c.enable_prefix_caching = false;
  Driver d(c);
  d.Add(1, 4, 8, /*priority=*/1);
  d.Step({{1, 0, 4, P, S}});
  d.Add(2, 4, 8, /*priority=*/0);
  d.Step({{1, 4, 1, D, S}, {2, 0, 4, P, S}});
  d.Step({{2, 4, 1, D, S}, {1, 5, 1, D, S}});
  d.Step({{2, 5, 1, D, S}, {1, 6, 1, D, S}});
  d.Step({{2, 6, 1, D, S}, {1, 7, 1, D, S}});
  d.Step({{2, 7, 1, D, S}}, /*want_preempted=*/{1});
  d.Step({{2, 8, 1, D, S}});  // sequence 1 (9 tokens, 3 blocks) does not fit next to it
  d.Step({{2, 9, 1, D, S}});
  d.Step({{2, 10, 1, D, S}});
  EXPECT_FALSE(d.sched().Contains(2));
  d.Step({{1, 0, 9, P, S}});
  d.Step({{1, 9, 1, D, S}});
  d.Step({{1, 10, 1, D, S}});
  EXPECT_FALSE(d.sched().HasWork());
}

// Two requests with a shared 40-token prefix at block_size 16 share 2 blocks; the second
// computes 32 prompt tokens fewer; the shared blocks are freed only when both finish.
TEST(SchedulerTest, PrefixCacheSharesBlocksOfACommonPrefix) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 256;
  Driver d(c);
  std::vector<int32_t> prefix;
  for (int32_t i = 0; i < 40; ++i) prefix.push_back(500 + i);
  std::vector<int32_t> a = prefix, b = prefix;
  for (int32_t i = 0; i < 4; ++i) a.push_back(1 + i);
  for (int32_t i = 0; i < 6; ++i) b.push_back(100 + i);
  d.AddTokens(1, a, 4);
  d.Step({{1, 0, 44, P, S}});
  d.AddTokens(2, b, 4);
  StepPlan p = d.Step({{1, 44, 1, D, S}, {2, 32, 14, P, S}});
  EXPECT_EQ(p.num_prefill_tokens, 14);
  EXPECT_EQ(p.num_cached_prompt_tokens, 32);
  const std::vector<int32_t>& ta = p.seqs[0].block_table;
  const std::vector<int32_t>& tb = p.seqs[1].block_table;
  EXPECT_EQ(ta[0], tb[0]);
  EXPECT_EQ(ta[1], tb[1]);
  EXPECT_NE(ta[2], tb[2]);
  SchedulerStats st = d.sched().stats();
  EXPECT_EQ(st.prefix_cache_queries_tokens, 44 + 46);
  EXPECT_EQ(st.prefix_cache_hit_tokens, 32);
  EXPECT_EQ(d.sched().block_manager().stats().prefix_cache_hit_blocks, 2);
  EXPECT_EQ(st.blocks_used, 4);  // a: 3 blocks; b: a's first 2 + 1 of its own

  d.Step({{1, 45, 1, D, S}, {2, 46, 1, D, S}});
  d.Step({{1, 46, 1, D, S}, {2, 47, 1, D, S}});
  // a finished: the shared blocks are still held by b.
  EXPECT_FALSE(d.sched().Contains(1));
  EXPECT_EQ(d.sched().block_manager().RefCount(ta[0]), 1);
  EXPECT_EQ(d.sched().block_manager().RefCount(ta[1]), 1);
  EXPECT_EQ(d.sched().stats().blocks_used, 3);
  d.Step({{2, 48, 1, D, S}});
  EXPECT_FALSE(d.sched().HasWork());
  EXPECT_EQ(d.sched().block_manager().RefCount(ta[0]), 0);
  EXPECT_EQ(d.sched().stats().blocks_used, 0);
  EXPECT_EQ(d.outputs(2).size(), 4u);
}

TEST(SchedulerTest, RejectsWhatCanNeverRunNamingTheLimit) {
  SchedulerConfig c = SmallConfig();
  c.num_blocks = 4;
  c.block_size = 16;
  c.max_total_tokens = 100;
  auto s = std::move(*Scheduler::Create(c));
  absl::Status st = s->AddRequest({1, std::vector<int32_t>(60, 7), 10});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("needs 5 KV blocks"));
  EXPECT_THAT(st.message(), HasSubstr("num_blocks 4"));

  st = s->AddRequest({1, std::vector<int32_t>(90, 7), 20});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("= 110 exceeds max_total_tokens (100)"));
  EXPECT_EQ(s->CheckFits(90, 20), st);  // the same checks, without a request
  EXPECT_TRUE(s->CheckFits(48, 16).ok());

  st = s->AddRequest({1, {}, 10});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("empty"));
  st = s->AddRequest({1, {1, 2}, 0});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("max_new_tokens"));
  EXPECT_FALSE(s->HasWork());
  EXPECT_EQ(s->stats().waiting_tokens, 0);

  ASSERT_TRUE(s->AddRequest({1, std::vector<int32_t>(48, 7), 16}).ok());  // exactly 4 blocks
  EXPECT_EQ(s->AddRequest({1, {1}, 1}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s->num_waiting(), 1u);

  c.enable_chunked_prefill = false;
  c.max_num_batched_tokens = 32;
  s = std::move(*Scheduler::Create(c));
  st = s->AddRequest({1, std::vector<int32_t>(30, 7), 10});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("max_num_batched_tokens (32)"));
  EXPECT_TRUE(s->AddRequest({1, std::vector<int32_t>(30, 7), 3}).ok());
  EXPECT_TRUE(s->CheckInvariants().ok());
}

// A prompt larger than the waiting queue's token bound could never be queued: refused for good
// (not a retryable ResourceExhausted), even on an empty queue.
TEST(SchedulerTest, APromptTheQueueCanNeverHoldIsInvalidArgument) {
  SchedulerConfig c = SmallConfig();
  c.max_waiting_prompt_tokens = 10;
  auto s = std::move(*Scheduler::Create(c));
  absl::Status st = s->AddRequest({1, std::vector<int32_t>(11, 1), 2});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("max_waiting_prompt_tokens (10)"));
  EXPECT_EQ(s->CheckFits(11, 2), st);
  EXPECT_TRUE(s->CheckFits(10, 2).ok());
  EXPECT_FALSE(s->HasWork());
  // Work already admitted (a beam search's later rounds) is not held to the waiting bounds.
  SequenceSpec admitted{2, std::vector<int32_t>(11, 1), 2};
  admitted.bypass_waiting_limits = true;
  EXPECT_TRUE(s->AddRequest(admitted).ok());
  EXPECT_TRUE(s->CheckInvariants().ok());
}

TEST(SchedulerTest, FullQueueIsResourceExhausted) {
  SchedulerConfig c = SmallConfig();
  c.max_waiting_requests = 2;
  auto s = std::move(*Scheduler::Create(c));
  ASSERT_TRUE(s->AddRequest({1, {1, 2, 3}, 2}).ok());
  ASSERT_TRUE(s->AddRequest({2, {1, 2, 3}, 2}).ok());
  absl::Status st = s->AddRequest({3, {1, 2, 3}, 2});
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("max_waiting_requests 2"));
  EXPECT_FALSE(s->Contains(3));
  StepPlan plan = s->Schedule();  // admits both: the queue has room again
  EXPECT_EQ(plan.seqs.size(), 2u);
  EXPECT_TRUE(s->AddRequest({3, {1, 2, 3}, 2}).ok());

  c.max_waiting_requests = 100;
  c.max_waiting_prompt_tokens = 10;
  s = std::move(*Scheduler::Create(c));
  ASSERT_TRUE(s->AddRequest({1, std::vector<int32_t>(8, 1), 2}).ok());
  st = s->AddRequest({2, std::vector<int32_t>(3, 1), 2});
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("max_waiting_prompt_tokens (10)"));
  EXPECT_TRUE(s->AddRequest({2, std::vector<int32_t>(2, 1), 2}).ok());
  EXPECT_EQ(s->stats().waiting_tokens, 10);
  EXPECT_TRUE(s->CheckInvariants().ok());

  EXPECT_TRUE(s->CheckWaitingRoom(0, 0).ok());
  EXPECT_EQ(s->CheckWaitingRoom(0, 1).code(), absl::StatusCode::kResourceExhausted);
  // Work already admitted (a beam search's later rounds) queues past both bounds.
  SequenceSpec admitted{3, std::vector<int32_t>(5, 1), 2};
  EXPECT_EQ(s->AddRequest(admitted).code(), absl::StatusCode::kResourceExhausted);
  admitted.bypass_waiting_limits = true;
  EXPECT_TRUE(s->AddRequest(admitted).ok());
  EXPECT_EQ(s->stats().waiting_tokens, 15);
  EXPECT_TRUE(s->CheckInvariants().ok());
}

TEST(SchedulerTest, CancelWaitingAndRunning) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 1;
  Driver d(c);
  d.Add(1, 20, 5);
  d.Add(2, 20, 5);
  d.Step({{1, 0, 20, P, S}});
  EXPECT_TRUE(d.sched().Cancel(2));  // waiting
  EXPECT_FALSE(d.sched().Cancel(2));
  EXPECT_EQ(d.sched().num_waiting(), 0u);
  EXPECT_EQ(d.sched().stats().waiting_tokens, 0);
  EXPECT_TRUE(d.sched().CheckInvariants().ok());
  EXPECT_EQ(d.sched().stats().blocks_used, 2);
  EXPECT_TRUE(d.sched().Cancel(1));  // running: blocks back at once
  EXPECT_EQ(d.sched().stats().blocks_used, 0);
  EXPECT_FALSE(d.sched().HasWork());
  EXPECT_TRUE(d.sched().Tokens(1).empty());
  EXPECT_FALSE(d.sched().Cancel(99));
  EXPECT_TRUE(d.sched().CheckInvariants().ok());
}

TEST(SchedulerTest, CancelBetweenScheduleAndUpdate) {
  Driver d(SmallConfig());
  d.Add(1, 10, 5);
  d.Add(2, 10, 5);
  d.Add(3, 10, 5);
  StepPlan plan = d.sched().Schedule();
  ASSERT_EQ(plan.seqs.size(), 3u);
  EXPECT_TRUE(d.sched().Cancel(1));
  // Cancelled and re-added under the same id: the old plan entry must not touch the new one.
  EXPECT_TRUE(d.sched().Cancel(3));
  ASSERT_TRUE(d.sched().AddRequest({3, std::vector<int32_t>(7, 3), 2}).ok());
  EXPECT_EQ(d.sched().stats().blocks_used, 1);
  absl::Status st = d.sched().Update(plan, {{1, 11, false}, {2, 22, false}, {3, 33, false}});
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(d.sched().CheckInvariants().ok()) << d.sched().CheckInvariants();
  EXPECT_FALSE(d.sched().Contains(1));
  EXPECT_EQ(d.sched().NumOutputTokens(2), 1);
  EXPECT_EQ(d.sched().Tokens(2).back(), 22);
  EXPECT_FALSE(d.sched().IsRunning(3));
  EXPECT_EQ(d.sched().Tokens(3).size(), 7u);
  StepPlan next = d.sched().Schedule();
  ASSERT_EQ(next.seqs.size(), 2u);
  EXPECT_EQ(next.seqs[0].id, 2);
  EXPECT_EQ(next.seqs[0].num_computed, 10);
  EXPECT_EQ(next.seqs[1].id, 3);
  EXPECT_EQ(next.seqs[1].num_computed, 0);
}

TEST(SchedulerTest, UpdateReportsBrokenContractAndStaysConsistent) {
  Driver d(SmallConfig());
  d.Add(1, 4, 3);
  d.Add(2, 4, 1);
  d.Add(3, 4, 3);
  StepPlan plan = d.sched().Schedule();
  ASSERT_EQ(plan.seqs.size(), 3u);
  // 1: sampled but no token; 2: reached max_new_tokens (1) but not finished; 3: fine.
  absl::Status st =
      d.sched().Update(plan, {{1, absl::nullopt, false}, {2, 5, false}, {3, 6, false}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("sequence 1: sampled step without a token"));
  EXPECT_THAT(st.message(), HasSubstr("sequence 2: reached max_new_tokens (1)"));
  EXPECT_FALSE(d.sched().Contains(1));
  EXPECT_FALSE(d.sched().Contains(2));
  EXPECT_EQ(d.sched().NumOutputTokens(3), 1);
  EXPECT_TRUE(d.sched().CheckInvariants().ok());

  plan = d.sched().Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  st = d.sched().Update(plan, {{3, 7, false}, {3, 8, false}, {42, 1, true}});
  EXPECT_THAT(st.message(), HasSubstr("duplicate output"));
  EXPECT_EQ(d.sched().NumOutputTokens(3), 2);
  EXPECT_TRUE(d.sched().CheckInvariants().ok());
}

TEST(SchedulerTest, FinishedWithoutTokenIsFine) {
  Driver d(SmallConfig());
  d.Add(1, 4, 3);
  StepPlan plan = d.sched().Schedule();
  EXPECT_TRUE(d.sched().Update(plan, {{1, absl::nullopt, true}}).ok());
  EXPECT_FALSE(d.sched().HasWork());
  EXPECT_EQ(d.sched().stats().blocks_used, 0);
}

TEST(SchedulerTest, CreateValidatesConfig) {
  SchedulerConfig c = SmallConfig();
  c.num_blocks = 0;
  EXPECT_EQ(Scheduler::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = SmallConfig();
  c.max_num_batched_tokens = 0;
  EXPECT_THAT(Scheduler::Create(c).status().message(), HasSubstr("max_num_batched_tokens"));
}

}  // namespace
}  // namespace blossom
