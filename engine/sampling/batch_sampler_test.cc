#include "engine/sampling/batch_sampler.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

constexpr int64_t kVocab = 64;

std::vector<float> RandomLogits(int64_t rows, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(rows * kVocab));
  for (float& x : logits) x = normal(gen);
  return logits;
}

std::vector<SamplingParams> MixedParams() {
  std::vector<SamplingParams> all(5);
  all[0].temperature = 0.0f;  // greedy
  all[0].logprobs = 3;
  all[1].temperature = 0.8f;
  all[1].top_k = 10;
  all[1].top_p = 0.9f;
  all[2].temperature = 1.2f;
  all[2].typical_p = 0.7f;
  all[2].min_p = 0.05f;
  all[2].logprobs = 0;
  all[3].repetition_penalty = 1.3f;
  all[3].frequency_penalty = 0.5f;
  all[3].presence_penalty = 0.25f;
  all[4].temperature = 0.5f;
  all[4].logprobs = 5;
  return all;
}

TEST(HostBatchSamplerTest, MatchesSampleRowByRow) {
  const int64_t rows = 5;
  std::vector<float> logits = RandomLogits(rows, 7);
  const std::vector<SamplingParams> params = MixedParams();
  const std::vector<int32_t> prompt = {1, 2, 3, 2}, output = {4, 4, 9};
  const std::vector<int32_t> suppressed = {0};
  for (int step = 0; step < 3; ++step) {
    std::vector<RequestRng> batch_rngs, single_rngs;
    for (size_t i = 0; i < params.size(); ++i) {
      batch_rngs.emplace_back(uint64_t{100} + i);
      single_rngs.emplace_back(uint64_t{100} + i);
    }
    // Rows in an order other than the logits': each row names its own.
    std::vector<SampleRow> sample_rows;
    for (int64_t i = rows - 1; i >= 0; --i) {
      SampleRow row;
      row.logit_row = i;
      row.params = &params[i];
      row.context.prompt_tokens = prompt;
      row.context.output_tokens = output;
      if (i == 1) row.context.suppressed_tokens = suppressed;
      row.rng = &batch_rngs[i];
      sample_rows.push_back(row);
    }
    HostBatchSampler sampler;
    std::vector<absl::StatusOr<SampleResult>> results;
    ASSERT_TRUE(sampler
                    .SampleBatch(Tensor(logits.data(), DType::kF32, {rows, kVocab}), sample_rows,
                                 &results)
                    .ok());
    ASSERT_EQ(results.size(), sample_rows.size());
    SamplerScratch scratch;
    for (size_t k = 0; k < sample_rows.size(); ++k) {
      const SampleRow& row = sample_rows[k];
      absl::StatusOr<SampleResult> want =
          Sample(absl::MakeConstSpan(logits.data() + row.logit_row * kVocab, kVocab),
                 *row.params, row.context, single_rngs[row.logit_row], scratch);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(results[k].ok()) << results[k].status();
      EXPECT_EQ(results[k]->token, want->token) << "row " << row.logit_row;
      EXPECT_EQ(results[k]->logprob, want->logprob) << "row " << row.logit_row;  // bit-identical
      ASSERT_EQ(results[k]->top.size(), want->top.size());
      for (size_t t = 0; t < want->top.size(); ++t) {
        EXPECT_EQ(results[k]->top[t].token, want->top[t].token);
        EXPECT_EQ(results[k]->top[t].logprob, want->top[t].logprob);
      }
    }
    // The generators advanced alike: the next draws agree.
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_EQ(batch_rngs[i].Uniform(), single_rngs[i].Uniform()) << "request " << i;
    logits = RandomLogits(rows, 8 + step);
  }
}

TEST(HostBatchSamplerTest, ABadRowFailsOnlyItself) {
  std::vector<float> logits = RandomLogits(2, 3);
  logits[kVocab + 5] = std::nanf("");  // row 1: a model fault
  SamplingParams params;
  RequestRng rng0(1), rng1(2);
  std::vector<SampleRow> rows(2);
  rows[0].logit_row = 0;
  rows[0].params = &params;
  rows[0].rng = &rng0;
  rows[1].logit_row = 1;
  rows[1].params = &params;
  rows[1].rng = &rng1;
  HostBatchSampler sampler;
  std::vector<absl::StatusOr<SampleResult>> results;
  ASSERT_TRUE(
      sampler.SampleBatch(Tensor(logits.data(), DType::kF32, {2, kVocab}), rows, &results).ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << results[0].status();
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kInternal);
}

TEST(HostBatchSamplerTest, RefusesWhatItCannotRead) {
  std::vector<float> logits = RandomLogits(2, 4);
  SamplingParams params;
  RequestRng rng(1);
  SampleRow row;
  row.params = &params;
  row.rng = &rng;
  HostBatchSampler sampler;
  std::vector<absl::StatusOr<SampleResult>> results;
  row.logit_row = 2;  // past the last row
  EXPECT_EQ(sampler.SampleBatch(Tensor(logits.data(), DType::kF32, {2, kVocab}), {row}, &results)
                .code(),
            absl::StatusCode::kInvalidArgument);
  row.logit_row = 0;
  EXPECT_EQ(sampler.SampleBatch(Tensor(logits.data(), DType::kBF16, {2, kVocab}), {row}, &results)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sampler
                .SampleBatch(Tensor(logits.data(), DType::kF32, {2, kVocab}, DeviceKind::kCuda),
                             {row}, &results)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      sampler.SampleBatch(Tensor(logits.data(), DType::kF32, {2, kVocab}), {row}, &results).ok());
}

// ScoreRows is RawLogprobs row by row, bit for bit; per-row errors stay in their rows and
// whole-call errors (a row outside the tensor, top_n past the cap, device logits) refuse the call.
TEST(HostBatchSamplerTest, ScoreRowsIsRawLogprobsRowByRow) {
  std::vector<float> logits = RandomLogits(3, 5);
  logits[static_cast<size_t>(2 * kVocab + 1)] = NAN;
  const Tensor tensor(logits.data(), DType::kF32, {3, kVocab});
  const std::vector<ScoreRow> rows = {
      {1, 7, 3}, {0, 63, 0}, {2, 5, 1}, {0, static_cast<int32_t>(kVocab), 2}, {1, 0, kMaxLogprobs}};
  HostBatchSampler sampler;
  std::vector<absl::StatusOr<SampleResult>> results;
  ASSERT_TRUE(sampler.ScoreRows(tensor, rows, &results).ok());
  ASSERT_EQ(results.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const absl::StatusOr<SampleResult> want = RawLogprobs(
        absl::MakeConstSpan(logits.data() + rows[i].logit_row * kVocab, kVocab), rows[i].token,
        rows[i].top_n);
    ASSERT_EQ(results[i].status().code(), want.status().code()) << i;
    if (!want.ok()) continue;
    EXPECT_EQ(results[i]->token, want->token);
    EXPECT_EQ(results[i]->logprob, want->logprob);
    EXPECT_EQ(results[i]->rank, want->rank);
    ASSERT_EQ(results[i]->top.size(), want->top.size());
    for (size_t t = 0; t < want->top.size(); ++t) {
      EXPECT_EQ(results[i]->top[t].token, want->top[t].token);
      EXPECT_EQ(results[i]->top[t].logprob, want->top[t].logprob);
    }
  }
  EXPECT_EQ(results[2].status().code(), absl::StatusCode::kInternal) << "a NaN in its row";
  EXPECT_EQ(results[3].status().code(), absl::StatusCode::kInvalidArgument) << "token past vocab";
  EXPECT_EQ(results[4]->top.size(), static_cast<size_t>(kMaxLogprobs));

  const ScoreRow past = {3, 0, 0}, too_many = {0, 0, kMaxLogprobs + 1};
  EXPECT_EQ(sampler.ScoreRows(tensor, {past}, &results).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sampler.ScoreRows(tensor, {too_many}, &results).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sampler
                .ScoreRows(Tensor(logits.data(), DType::kF32, {3, kVocab}, DeviceKind::kCuda),
                           {rows[0]}, &results)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blossom
