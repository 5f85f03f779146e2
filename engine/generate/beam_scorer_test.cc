#include "engine/generate/beam_scorer.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

using Candidates = std::vector<std::vector<TokenLogprob>>;

BeamSearchParams Params(int32_t width, std::vector<int32_t> end_tokens, int32_t max_new = 8) {
  BeamSearchParams p;
  p.beam_width = width;
  p.num_return_sequences = width;
  p.end_tokens = std::move(end_tokens);
  p.max_new_tokens = max_new;
  return p;
}

std::vector<std::vector<int32_t>> Tokens(const std::vector<BeamHypothesis>& beams) {
  std::vector<std::vector<int32_t>> out;
  for (const BeamHypothesis& b : beams) out.push_back(b.tokens);
  return out;
}

TEST(BeamScorerTest, KeepsTheBestContinuationsOverAllBeams) {
  BeamScorer scorer(Params(2, {9}));
  EXPECT_EQ(scorer.CandidatesPerBeam(), 4);
  ASSERT_EQ(scorer.running().size(), 1u);  // the first step has one beam (HF: others at -1e9)
  ASSERT_TRUE(scorer.Step(Candidates{{{5, -0.5f}, {6, -1.0f}, {7, -2.0f}, {8, -3.0f}}}).ok());
  ASSERT_EQ(Tokens(scorer.running()), (std::vector<std::vector<int32_t>>{{5}, {6}}));
  // Beam {6} has the best continuation; {5}'s second best still beats {6}'s second.
  ASSERT_TRUE(scorer.Step(Candidates{{{1, -1.2f}, {2, -1.5f}, {3, -4.0f}, {4, -5.0f}},
                                     {{1, -0.1f}, {2, -3.0f}, {3, -4.0f}, {4, -5.0f}}})
                  .ok());
  EXPECT_EQ(Tokens(scorer.running()), (std::vector<std::vector<int32_t>>{{6, 1}, {5, 1}}));
  EXPECT_FLOAT_EQ(scorer.running()[0].cumulative_logprob, -1.0f + -0.1f);
  EXPECT_EQ(scorer.running()[1].logprobs, (std::vector<float>{-0.5f, -1.2f}));
}

TEST(BeamScorerTest, AnEndTokenAmongTheFirstWidthRanksFinishesItsBeam) {
  BeamScorer scorer(Params(2, {9}, /*max_new=*/3));
  EXPECT_EQ(scorer.CandidatesPerBeam(), 4);
  // Rank 0 is the end token: a finished sequence of length 1, and two beams run on.
  ASSERT_TRUE(scorer.Step(Candidates{{{9, -0.1f}, {5, -1.0f}, {6, -2.0f}, {7, -3.0f}}}).ok());
  EXPECT_EQ(Tokens(scorer.running()), (std::vector<std::vector<int32_t>>{{5}, {6}}));
  // An end token ranked 2 (>= width) is passed over, not finished.
  ASSERT_TRUE(scorer.Step(Candidates{{{1, -0.1f}, {2, -0.2f}, {3, -5.0f}, {4, -6.0f}},
                                     {{9, -0.1f}, {1, -3.0f}, {2, -4.0f}, {3, -5.0f}}})
                  .ok());
  EXPECT_EQ(Tokens(scorer.running()), (std::vector<std::vector<int32_t>>{{5, 1}, {5, 2}}));
  ASSERT_FALSE(scorer.done());
  ASSERT_TRUE(scorer.Step(Candidates{{{3, -0.3f}, {4, -0.4f}, {5, -5.0f}, {6, -6.0f}},
                                     {{3, -0.3f}, {4, -0.4f}, {5, -5.0f}, {6, -6.0f}}})
                  .ok());
  ASSERT_TRUE(scorer.done());  // max_new_tokens: the running beams join the finished one
  const std::vector<BeamHypothesis> best = scorer.Finalize();
  ASSERT_EQ(best.size(), 2u);
  // {9}: -0.1 / 1; {5,1,3}: -1.4 / 3; {5,1,4}: -1.5 / 3; {5,2,3}: -1.5 / 3.
  EXPECT_EQ(best[0].tokens, (std::vector<int32_t>{9}));
  EXPECT_TRUE(best[0].ended_by_end_token);
  EXPECT_DOUBLE_EQ(best[0].score, static_cast<double>(-0.1f));
  EXPECT_EQ(best[1].tokens, (std::vector<int32_t>{5, 1, 3}));
  EXPECT_FALSE(best[1].ended_by_end_token);
  EXPECT_NEAR(best[1].score, -1.4 / 3, 1e-6);
}

TEST(BeamScorerTest, LengthPenaltyDividesByTheGeneratedLengthToItsPower) {
  BeamSearchParams p = Params(1, {9}, /*max_new=*/2);
  p.length_penalty = 2.0;
  BeamScorer scorer(p);
  ASSERT_TRUE(scorer.Step(Candidates{{{5, -1.0f}, {6, -2.0f}}}).ok());
  ASSERT_TRUE(scorer.Step(Candidates{{{7, -1.0f}, {8, -2.0f}}}).ok());
  ASSERT_TRUE(scorer.done());
  EXPECT_DOUBLE_EQ(scorer.Finalize()[0].score, -2.0 / 4.0);
}

TEST(BeamScorerTest, EarlyStoppingModes) {
  // Two beams finish at step 1 with -0.1 and -0.2 (score / 1); the best continuation is -1.0.
  const Candidates first{{{9, -0.1f}, {5, -1.0f}, {6, -2.0f}, {7, -3.0f}}};
  const Candidates second{{{8, -0.1f}, {1, -3.0f}, {2, -4.0f}, {3, -5.0f}},
                          {{8, -0.1f}, {1, -3.0f}, {2, -4.0f}, {3, -5.0f}}};
  for (EarlyStopping mode :
       {EarlyStopping::kWhenFull, EarlyStopping::kHeuristic, EarlyStopping::kNever}) {
    BeamSearchParams p = Params(2, {8, 9}, /*max_new=*/50);
    p.early_stopping = mode;
    BeamScorer scorer(p);
    EXPECT_EQ(scorer.CandidatesPerBeam(), 6);
    ASSERT_TRUE(scorer.Step(first).ok());
    ASSERT_FALSE(scorer.done());  // one finished of two
    ASSERT_TRUE(scorer.Step(second).ok());
    // Finished now: {9} (-0.1) and {5, 8} (-1.1 / 2). Best candidate left: -1.1 at length 2.
    //  kWhenFull: two finished -> over. kHeuristic: worst -0.55 >= -1.1 / 2 -> over.
    //  kNever: -0.55 >= -1.1 / 50? no -> runs on.
    EXPECT_EQ(scorer.done(), mode != EarlyStopping::kNever) << static_cast<int>(mode);
  }
}

TEST(BeamScorerTest, EndTokensAreNoCandidatesBeforeMinNewTokens) {
  BeamSearchParams p = Params(1, {9}, /*max_new=*/3);
  p.min_new_tokens = 1;
  BeamScorer scorer(p);
  ASSERT_TRUE(scorer.Step(Candidates{{{9, -0.1f}, {5, -1.0f}}}).ok());
  EXPECT_EQ(Tokens(scorer.running()), (std::vector<std::vector<int32_t>>{{5}}));
  ASSERT_TRUE(scorer.Step(Candidates{{{9, -0.1f}, {5, -1.0f}}}).ok());
  // {5, 9} finished (-1.1 / 2), and no candidate can beat it at this length: over.
  ASSERT_TRUE(scorer.done());
  EXPECT_EQ(scorer.Finalize()[0].tokens, (std::vector<int32_t>{5, 9}));
}

TEST(BeamScorerTest, WithoutEndTokensEveryBeamRunsToTheLimit) {
  BeamScorer scorer(Params(2, {}, /*max_new=*/2));
  EXPECT_EQ(scorer.CandidatesPerBeam(), 4);
  ASSERT_TRUE(scorer.Step(Candidates{{{2, -0.1f}, {5, -1.0f}, {6, -2.0f}, {7, -3.0f}}}).ok());
  ASSERT_TRUE(scorer.Step(Candidates{{{2, -0.1f}, {5, -1.0f}, {6, -2.0f}, {7, -3.0f}},
                                     {{2, -0.1f}, {5, -1.0f}, {6, -2.0f}, {7, -3.0f}}})
                  .ok());
  ASSERT_TRUE(scorer.done());
  // {2, 5} and {5, 2} tie at -1.1: the smaller beam index ranks first (HF's topk), so {2, 5}.
  EXPECT_EQ(Tokens(scorer.Finalize()), (std::vector<std::vector<int32_t>>{{2, 2}, {2, 5}}));
}

TEST(BeamScorerTest, EqualScoresReturnTheLaterFinishedFirst) {
  BeamSearchParams p = Params(2, {9}, /*max_new=*/1);
  BeamScorer scorer(p);
  ASSERT_TRUE(scorer.Step(Candidates{{{5, -1.0f}, {6, -1.0f}, {7, -3.0f}, {8, -4.0f}}}).ok());
  ASSERT_TRUE(scorer.done());
  // Ranked {5} then {6} (smaller token first, as HF's topk); Python's sorted + pop returns the
  // later-added of equal scores first.
  EXPECT_EQ(Tokens(scorer.Finalize()), (std::vector<std::vector<int32_t>>{{6}, {5}}));
}

TEST(BeamScorerTest, MisuseIsAnErrorNotACrash) {
  BeamScorer scorer(Params(2, {9}, /*max_new=*/1));
  EXPECT_EQ(scorer.Step(Candidates{{}, {}}).code(), absl::StatusCode::kInvalidArgument);
  // Too few tokens to continue two beams.
  EXPECT_EQ(scorer.Step(Candidates{{{9, -0.1f}, {5, -1.0f}}}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(scorer.Step(Candidates{{{5, -1.0f}, {6, -1.0f}, {7, -3.0f}, {8, -4.0f}}}).ok());
  EXPECT_EQ(scorer.Step(Candidates{}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BeamScorerTest, ValidateNamesTheField) {
  struct Case {
    std::string name;
    BeamSearchParams params;
    std::string field;  // empty: valid
  };
  std::vector<Case> cases;
  auto with = [](auto edit) {
    BeamSearchParams p = Params(4, {2});
    edit(p);
    return p;
  };
  cases.push_back({"ok", with([](BeamSearchParams&) {}), ""});
  cases.push_back({"width_max", with([](BeamSearchParams& p) { p.beam_width = 10; }), ""});
  cases.push_back({"width_0", with([](BeamSearchParams& p) { p.beam_width = 0; }), "beam_width"});
  cases.push_back({"width_11", with([](BeamSearchParams& p) { p.beam_width = 11; }), "beam_width"});
  cases.push_back({"candidates", with([](BeamSearchParams& p) {
                     p.beam_width = 7;
                     p.end_tokens = {2, 3};
                   }),
                   "beam_width"});
  cases.push_back({"return_0", with([](BeamSearchParams& p) { p.num_return_sequences = 0; }),
                   "num_return_sequences"});
  cases.push_back({"return_wide", with([](BeamSearchParams& p) { p.num_return_sequences = 5; }),
                   "num_return_sequences"});
  cases.push_back({"penalty_nan", with([](BeamSearchParams& p) { p.length_penalty = NAN; }),
                   "length_penalty"});
  cases.push_back({"penalty_inf", with([](BeamSearchParams& p) { p.length_penalty = INFINITY; }),
                   "length_penalty"});
  cases.push_back({"penalty_max", with([](BeamSearchParams& p) { p.length_penalty = -10.0; }),
                   ""});
  cases.push_back({"penalty_over", with([](BeamSearchParams& p) { p.length_penalty = 10.5; }),
                   "length_penalty"});
  cases.push_back({"max_0", with([](BeamSearchParams& p) { p.max_new_tokens = 0; }),
                   "max_new_tokens"});
  cases.push_back({"min_over", with([](BeamSearchParams& p) { p.min_new_tokens = 9; }),
                   "min_new_tokens"});
  cases.push_back({"end_oov", with([](BeamSearchParams& p) { p.end_tokens = {100}; }),
                   "end_tokens"});
  cases.push_back({"end_negative", with([](BeamSearchParams& p) { p.end_tokens = {-1}; }),
                   "end_tokens"});
  cases.push_back({"end_twice", with([](BeamSearchParams& p) { p.end_tokens = {2, 2}; }),
                   "end_tokens"});
  cases.push_back({"small_vocab", with([](BeamSearchParams& p) { p.beam_width = 10; }), ""});
  for (const Case& c : cases) {
    const int32_t vocab = c.name == "small_vocab" ? 19 : 100;
    const absl::Status s = Validate(c.params, vocab);
    if (c.name == "small_vocab") {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
      continue;
    }
    if (c.field.empty()) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_EQ(s.message().substr(0, c.field.size()), c.field) << c.name << ": " << s;
    }
  }
}

}  // namespace
}  // namespace blossom
