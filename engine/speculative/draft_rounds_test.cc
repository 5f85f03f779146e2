#include "engine/speculative/draft_rounds.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(DraftVerifiedTest, OnlyTheRoundsDraftOfAnUnfinishedSequence) {
  const std::vector<int32_t> draft = {7, 8};
  EXPECT_TRUE(DraftVerified(draft, 0, 7, false));
  EXPECT_TRUE(DraftVerified(draft, 1, 8, false));
  EXPECT_FALSE(DraftVerified(draft, 1, 7, false));  // another round's draft
  EXPECT_FALSE(DraftVerified(draft, 0, 7, true));   // nothing after a finishing token is kept
  EXPECT_FALSE(DraftVerified(draft, 2, 9, false));  // past the draft: the bonus token
  EXPECT_FALSE(DraftVerified({}, 0, 7, false));
}

// Returns each row's index as its token and records the rows of every call.
class ArgmaxOfRowIndex : public BatchSampler {
 public:
  std::string name() const override { return "row-index"; }
  absl::Status SampleBatch(const Tensor&, absl::Span<const SampleRow> rows,
                           std::vector<absl::StatusOr<SampleResult>>* results) override {
    if (fail_call == static_cast<int>(calls.size())) {
      calls.emplace_back();
      return absl::InternalError("device lost");
    }
    calls.emplace_back();
    results->clear();
    for (const SampleRow& row : rows) {
      calls.back().push_back(row.logit_row);
      SampleResult r;
      r.token = static_cast<int32_t>(row.logit_row);
      results->push_back(r);
    }
    return absl::OkStatus();
  }
  absl::Status ScoreRows(const Tensor&, absl::Span<const ScoreRow>,
                         std::vector<absl::StatusOr<SampleResult>>*) override {
    return absl::FailedPreconditionError("draft rounds score no prompt rows");
  }
  std::vector<std::vector<int64_t>> calls;
  int fail_call = -1;
};

SampleRow Row(int64_t logit_row) {
  SampleRow row;
  row.logit_row = logit_row;
  return row;
}

TEST(SampleInRoundsTest, EachRoundIsOneCallWithTheRowsStillVerifying) {
  ArgmaxOfRowIndex sampler;
  // Entry 0 (rows 0..2) keeps going while its token is below 2; entry 1 (row 5) stops at once.
  std::vector<std::vector<std::pair<size_t, int32_t>>> seen;
  const absl::Status status = SampleInRounds(
      sampler, Tensor(), {0, 1}, {Row(0), Row(5)},
      [&](size_t entry, size_t round, const SampleRow& row,
          absl::StatusOr<SampleResult> sample) -> absl::StatusOr<absl::optional<SampleRow>> {
        EXPECT_TRUE(sample.ok());
        if (seen.size() <= round) seen.resize(round + 1);
        seen[round].push_back({entry, sample->token});
        if (entry == 0 && sample->token < 2) return Row(row.logit_row + 1);
        return absl::nullopt;
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(sampler.calls, (std::vector<std::vector<int64_t>>{{0, 5}, {1}, {2}}));
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], (std::vector<std::pair<size_t, int32_t>>{{0, 0}, {1, 5}}));
  EXPECT_EQ(seen[2], (std::vector<std::pair<size_t, int32_t>>{{0, 2}}));
}

TEST(SampleInRoundsTest, AFailedCallReachesEveryRowOfItsRound) {
  ArgmaxOfRowIndex sampler;
  sampler.fail_call = 0;
  int failures = 0;
  const absl::Status status = SampleInRounds(
      sampler, Tensor(), {3, 4}, {Row(0), Row(1)},
      [&](size_t, size_t, const SampleRow&,
          absl::StatusOr<SampleResult> sample) -> absl::StatusOr<absl::optional<SampleRow>> {
        EXPECT_EQ(sample.status().message(), "device lost");
        ++failures;
        return absl::nullopt;
      });
  EXPECT_TRUE(status.ok());  // the decision handled it
  EXPECT_EQ(failures, 2);
}

TEST(SampleInRoundsTest, ADecisionErrorStopsAtOnce) {
  ArgmaxOfRowIndex sampler;
  int decisions = 0;
  const absl::Status status = SampleInRounds(
      sampler, Tensor(), {0, 1}, {Row(0), Row(1)},
      [&](size_t, size_t, const SampleRow&,
          absl::StatusOr<SampleResult>) -> absl::StatusOr<absl::optional<SampleRow>> {
        ++decisions;
        return absl::FailedPreconditionError("sequence finished");
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decisions, 1);
}

}  // namespace
}  // namespace blossom
