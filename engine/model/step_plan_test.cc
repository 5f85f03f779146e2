#include "engine/model/step_plan.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

StepBatch SampleBatch() {
  StepBatch batch;
  batch.token_ids = {5, 6, 7, 8};
  batch.query_start = {0, 3, 4};
  batch.context_len = {3, 9};
  batch.block_tables = {0, 1, 2, 3};
  batch.max_blocks_per_seq = 2;
  batch.logit_rows = {2, 3};
  return batch;
}

TEST(StepPlanTest, ForwardPlanRoundTrips) {
  const StepBatch batch = SampleBatch();
  absl::StatusOr<std::vector<int32_t>> words = PlanWords(EncodeForward(batch));
  ASSERT_TRUE(words.ok()) << words.status();
  EXPECT_EQ((*words)[0], static_cast<int32_t>(PlanKind::kForward));
  absl::StatusOr<StepBatch> decoded = DecodeForward(*words);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->token_ids, batch.token_ids);
  EXPECT_EQ(decoded->query_start, batch.query_start);
  EXPECT_EQ(decoded->context_len, batch.context_len);
  EXPECT_EQ(decoded->block_tables, batch.block_tables);
  EXPECT_EQ(decoded->max_blocks_per_seq, batch.max_blocks_per_seq);
  EXPECT_EQ(decoded->logit_rows, batch.logit_rows);
}

TEST(StepPlanTest, PlanCarriesItsArguments) {
  absl::StatusOr<std::vector<int32_t>> words =
      PlanWords(EncodePlan(PlanKind::kAllocateKv, {128, 16}));
  ASSERT_TRUE(words.ok()) << words.status();
  EXPECT_EQ(*words, (std::vector<int32_t>{static_cast<int32_t>(PlanKind::kAllocateKv), 128, 16}));
}

TEST(StepPlanTest, MalformedBytesAreInternal) {
  EXPECT_EQ(PlanWords("").status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(PlanWords("abc").status().code(), absl::StatusCode::kInternal);
}

TEST(StepPlanTest, TruncatedOrPaddedForwardPlanIsInternal) {
  absl::StatusOr<std::vector<int32_t>> words = PlanWords(EncodeForward(SampleBatch()));
  ASSERT_TRUE(words.ok());
  std::vector<int32_t> truncated(words->begin(), words->end() - 1);
  EXPECT_EQ(DecodeForward(truncated).status().code(), absl::StatusCode::kInternal);
  std::vector<int32_t> padded = *words;
  padded.push_back(0);
  EXPECT_EQ(DecodeForward(padded).status().code(), absl::StatusCode::kInternal);
  std::vector<int32_t> negative = *words;
  negative[2] = -1;  // the first vector's size
  EXPECT_EQ(DecodeForward(negative).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(DecodeForward({static_cast<int32_t>(PlanKind::kForward)}).status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace blossom
