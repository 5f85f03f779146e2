// Speculative decoding in the scheduler: draft tokens on decode entries, their KV slots, and
// Update() with accepted drafts.
#include <algorithm>
#include <memory>
#include <vector>

#include "engine/scheduler/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

SchedulerConfig Config(int32_t num_blocks = 16, int32_t budget = 64) {
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = budget;
  c.max_total_tokens = 512;
  c.block_size = 4;
  c.num_blocks = num_blocks;
  return c;
}

std::unique_ptr<Scheduler> Make(const SchedulerConfig& config) {
  auto s = Scheduler::Create(config);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// Always drafts `max_tokens` copies of 7 and records what it was asked.
struct FixedDraft {
  std::vector<int32_t> asked_max;
  DraftFn fn() {
    return [this](SeqId, absl::Span<const int32_t>, int32_t max_tokens) {
      asked_max.push_back(max_tokens);
      return std::vector<int32_t>(static_cast<size_t>(max_tokens), 7);
    };
  }
};

// Runs the prefill of a 5-token prompt and samples token 100: the sequence is then decoding with
// tokens.size() == 6 and num_computed == 5.
void Prefill(Scheduler& s, SeqId id, int32_t max_new) {
  ASSERT_TRUE(s.AddRequest({id, {1, 2, 3, 4, 5}, max_new, 0}).ok());
  const StepPlan plan = s.Schedule([](SeqId, absl::Span<const int32_t>, int32_t) {
    ADD_FAILURE() << "a prefill entry was offered a draft";
    return std::vector<int32_t>{};
  });
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_THAT(plan.seqs[0].draft_tokens, IsEmpty());
  SeqOutput out;
  out.id = id;
  out.token = 100;
  ASSERT_TRUE(s.Update(plan, {out}).ok());
}

TEST(SchedulerDraftTest, DecodeEntriesCarryDraftsAndTheirSlots) {
  auto s = Make(Config());
  Prefill(*s, 1, 10);
  FixedDraft draft;
  const StepPlan plan = s->Schedule(draft.fn());
  ASSERT_EQ(plan.seqs.size(), 1u);
  const ScheduledSeq& e = plan.seqs[0];
  EXPECT_EQ(e.num_computed, 5);
  EXPECT_EQ(e.num_new, 1);
  EXPECT_FALSE(e.is_prefill);
  EXPECT_TRUE(e.sample);
  // 1 output so far of 10: at most 10 - 1 - 1 = 8 drafts, so that the drafts and the token
  // sampled after them fit.
  EXPECT_THAT(draft.asked_max, ElementsAre(8));
  EXPECT_EQ(e.draft_tokens.size(), 8u);
  EXPECT_EQ(plan.num_draft_tokens, 8);
  EXPECT_EQ(plan.num_decode_tokens, 9);
  // Positions 5 .. 13 need 14 slots: 4 blocks of 4.
  EXPECT_EQ(e.block_table.size(), 4u);
  EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerDraftTest, AcceptedDraftsBecomeTokensAndComputedKv) {
  auto s = Make(Config());
  Prefill(*s, 1, 10);
  DraftFn three = [](SeqId, absl::Span<const int32_t>, int32_t) {
    return std::vector<int32_t>{7, 8, 9};
  };
  StepPlan plan = s->Schedule(three);
  ASSERT_EQ(plan.seqs[0].draft_tokens.size(), 3u);
  SeqOutput out;
  out.id = 1;
  out.accepted_drafts = 2;  // 7 and 8 verified; 9 was not: the model sampled 50 there
  out.token = 50;
  ASSERT_TRUE(s->Update(plan, {out}).ok());
  EXPECT_THAT(s->Tokens(1), ElementsAre(1, 2, 3, 4, 5, 100, 7, 8, 50));
  EXPECT_EQ(s->NumOutputTokens(1), 4);
  EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  // The next step starts at the token after the accepted drafts: 50 at position 8.
  plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].num_computed, 8);
  EXPECT_EQ(plan.seqs[0].num_new, 1);
  EXPECT_THAT(plan.seqs[0].draft_tokens, IsEmpty());
}

TEST(SchedulerDraftTest, TheRequestBoundAndTheTokenBudgetCapDrafts) {
  // Budget 5: the decode token leaves 4 for drafts.
  auto s = Make(Config(16, 5));
  Prefill(*s, 1, 20);
  FixedDraft draft;
  StepPlan plan = s->Schedule(draft.fn());
  EXPECT_THAT(draft.asked_max, ElementsAre(4));
  EXPECT_EQ(plan.seqs[0].draft_tokens.size(), 4u);

  // max_new_tokens 2 with one output: the next token is the last, so no draft is asked for.
  auto t = Make(Config());
  Prefill(*t, 1, 2);
  FixedDraft none;
  plan = t->Schedule(none.fn());
  EXPECT_THAT(none.asked_max, IsEmpty());
  EXPECT_THAT(plan.seqs[0].draft_tokens, IsEmpty());

  // A proposer that returns more than asked is cut to the cap.
  auto u = Make(Config(16, 5));
  Prefill(*u, 1, 20);
  plan = u->Schedule(
      [](SeqId, absl::Span<const int32_t>, int32_t) { return std::vector<int32_t>(50, 1); });
  EXPECT_EQ(plan.seqs[0].draft_tokens.size(), 4u);
}

TEST(SchedulerDraftTest, DraftsNeverPreempt) {
  // 3 blocks of 4: sequence 1 (6 tokens) holds 2 blocks, sequence 2 the last one after its
  // prefill. More than one draft for 1 would need a third block: it gets the one its second
  // block has room for, and nobody is preempted.
  auto s = Make(Config(3));
  Prefill(*s, 1, 6);
  ASSERT_TRUE(s->AddRequest({2, {9, 9}, 2, 0}).ok());
  StepPlan plan = s->Schedule();  // 1 decodes (no drafts asked), 2 prefills
  ASSERT_EQ(plan.seqs.size(), 2u);
  SeqOutput o1{1, 101, false}, o2{2, 200, false};
  ASSERT_TRUE(s->Update(plan, {o1, o2}).ok());
  FixedDraft draft;
  plan = s->Schedule(draft.fn());
  EXPECT_THAT(plan.preempted, IsEmpty());
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_THAT(plan.seqs[0].draft_tokens, ElementsAre(7));
  EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

// The free blocks a later running sequence needs for its own next token are not drafts' to
// take: drafts of an earlier sequence stop short of them.
TEST(SchedulerDraftTest, DraftsLeaveTheBlocksLaterSequencesNeed) {
  // 5 blocks of 4. Sequence 1: 8-token prompt (2 blocks), sequence 2: 4 tokens (1 block).
  auto s = Make(Config(5));
  ASSERT_TRUE(s->AddRequest({1, {1, 2, 3, 4, 5, 6, 7, 8}, 10, 0}).ok());
  ASSERT_TRUE(s->AddRequest({2, {9, 9, 9, 9}, 10, 0}).ok());
  StepPlan plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 2u);
  ASSERT_TRUE(s->Update(plan, {SeqOutput{1, 100, false}, SeqOutput{2, 200, false}}).ok());
  // Both decode next: each needs a new block for its ninth/fifth token, which leaves none
  // spare. Four drafts for sequence 1 fit the two free blocks: taken without the reservation,
  // they left none for sequence 2, which was preempted.
  plan = s->Schedule([](SeqId, absl::Span<const int32_t>, int32_t max_tokens) {
    return std::vector<int32_t>(static_cast<size_t>(std::min(max_tokens, 4)), 7);
  });
  EXPECT_THAT(plan.preempted, IsEmpty());
  ASSERT_EQ(plan.seqs.size(), 2u);
  // Each new block holds the sequence's token and 3 drafts (positions 8..11 and 4..7).
  EXPECT_EQ(plan.seqs[0].draft_tokens.size(), 3u);
  EXPECT_EQ(plan.seqs[1].draft_tokens.size(), 3u);
  EXPECT_EQ(plan.seqs[0].block_table.size(), 3u);
  EXPECT_EQ(plan.seqs[1].block_table.size(), 2u);
  EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

// Drafts are guesses: they must not take the token budget a later running sequence needs for its
// own next token (without the reservation, sequence 1's 7 drafts spent the whole budget of 8 and
// sequences 2 and 3 got no entry, step after step).
TEST(SchedulerDraftTest, DraftsLeaveEachLaterSequenceItsToken) {
  auto s = Make(Config(16, /*budget=*/8));
  for (SeqId id : {1, 2, 3}) ASSERT_TRUE(s->AddRequest({id, {9, 9}, 20, 0}).ok());
  StepPlan plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 3u);
  ASSERT_TRUE(s->Update(plan, {SeqOutput{1, 100, false}, SeqOutput{2, 100, false},
                               SeqOutput{3, 100, false}})
                  .ok());
  FixedDraft draft;
  for (int step = 0; step < 3; ++step) {
    plan = s->Schedule(draft.fn());
    ASSERT_EQ(plan.seqs.size(), 3u) << "step " << step;
    // 8 - its own token - one for each of the two sequences after it.
    EXPECT_LE(plan.seqs[0].draft_tokens.size(), 5u) << "step " << step;
    EXPECT_LE(plan.num_decode_tokens, 8) << "step " << step;
    std::vector<SeqOutput> outs;
    for (const ScheduledSeq& e : plan.seqs) {
      EXPECT_EQ(e.num_new, 1);
      outs.push_back(SeqOutput{e.id, 100, false});  // no draft accepted
    }
    ASSERT_TRUE(s->Update(plan, outs).ok());
    EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  }
  EXPECT_EQ(draft.asked_max.front(), 5);
}

// The blocks a step took for drafts that were then rejected go back at Update: kept, the next
// step counted them as the drafting sequence's and preempted another sequence for a block.
TEST(SchedulerDraftTest, RejectedDraftBlocksDoNotPreemptTheNextStep) {
  // 5 blocks of 4. Sequence 1: 5-token prompt (2 blocks); sequence 2: 3 tokens (1 block).
  auto s = Make(Config(5));
  ASSERT_TRUE(s->AddRequest({1, {1, 2, 3, 4, 5}, 15, 0}).ok());
  ASSERT_TRUE(s->AddRequest({2, {9, 9, 9}, 5, 0}).ok());
  StepPlan plan = s->Schedule();
  ASSERT_TRUE(s->Update(plan, {SeqOutput{1, 100, false}, SeqOutput{2, 200, false}}).ok());
  // Sequence 2's next token fits its block: sequence 1's drafts take both free blocks.
  FixedDraft draft;
  plan = s->Schedule(draft.fn());
  ASSERT_EQ(plan.seqs.size(), 2u);
  ASSERT_EQ(plan.seqs[0].block_table.size(), 4u);
  ASSERT_TRUE(s->Update(plan, {SeqOutput{1, 101, false}, SeqOutput{2, 201, false}}).ok());
  // Sequence 2 now needs its second block: free again, so nobody is preempted.
  plan = s->Schedule();
  EXPECT_THAT(plan.preempted, IsEmpty());
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(plan.seqs[0].block_table.size(), 2u) << "7 tokens need 2 blocks";
  EXPECT_EQ(plan.seqs[1].block_table.size(), 2u);
  EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerDraftTest, ABrokenAcceptCountFinishesTheSequence) {
  auto s = Make(Config());
  Prefill(*s, 1, 10);
  StepPlan plan = s->Schedule([](SeqId, absl::Span<const int32_t>, int32_t) {
    return std::vector<int32_t>{7, 8};
  });
  SeqOutput out;
  out.id = 1;
  out.accepted_drafts = 3;  // more than the 2 drafted
  out.token = 5;
  const absl::Status st = s->Update(plan, {out});
  EXPECT_THAT(st.message(), HasSubstr("3 accepted drafts of 2"));
  EXPECT_FALSE(s->Contains(1));
  EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
}

TEST(SchedulerDraftTest, FullBlocksOfAcceptedTokensEnterThePrefixCache) {
  auto s = Make(Config());
  Prefill(*s, 1, 10);  // tokens 1 2 3 4 5 100: one full block (1 2 3 4) cached
  StepPlan plan = s->Schedule([](SeqId, absl::Span<const int32_t>, int32_t) {
    return std::vector<int32_t>{7, 8, 9};
  });
  SeqOutput out;
  out.id = 1;
  out.accepted_drafts = 3;
  out.token = 11;  // computed: 1 2 3 4 | 5 100 7 8 | 9 -> two full blocks
  ASSERT_TRUE(s->Update(plan, {out}).ok());
  ASSERT_TRUE(s->Cancel(1));
  // A new request with the same first 8 tokens finds both blocks.
  ASSERT_TRUE(s->AddRequest({2, {1, 2, 3, 4, 5, 100, 7, 8, 42}, 1, 0}).ok());
  plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].num_cached, 8);
  EXPECT_THAT(std::vector<int32_t>(s->Tokens(2).begin(), s->Tokens(2).end()),
              ElementsAreArray({1, 2, 3, 4, 5, 100, 7, 8, 42}));
}

}  // namespace
}  // namespace blossom
