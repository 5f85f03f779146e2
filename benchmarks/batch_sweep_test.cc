#include "benchmarks/batch_sweep.h"

#include <memory>

#include "engine/model/model_runner.h"
#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

TEST(PercentilesTest, LinearInterpolationLikeNumpy) {
  Percentiles p = ComputePercentiles({4, 1, 3, 2, 5, 6, 7, 8, 9, 10});
  EXPECT_DOUBLE_EQ(p.mean, 5.5);
  EXPECT_DOUBLE_EQ(p.p50, 5.5);   // numpy.percentile(range(1, 11), 50)
  EXPECT_DOUBLE_EQ(p.p90, 9.1);   // ... 90
  EXPECT_DOUBLE_EQ(p.p99, 9.91);  // ... 99
  Percentiles one = ComputePercentiles({2.5});
  EXPECT_EQ(one.p50, 2.5);
  EXPECT_EQ(one.p99, 2.5);
  Percentiles none = ComputePercentiles({});
  EXPECT_EQ(none.mean, 0.0);
}

TEST(FinishBatchTest, DerivesTheSeedNumbers) {
  BatchResult b;
  b.batch_size = 2;
  b.prompt_lengths = {3, 5};
  // Two cycles of 2 x 10 tokens: 1.0 s and 3.0 s.
  CycleRecord c1{0.0, 0.1, 0.2, 0.3, 1.0, 8, 20, 0.2, 0.7, 9};
  CycleRecord c2{1.0, 1.1, 1.3, 1.5, 4.0, 8, 20, 0.4, 2.5, 9};
  b.cycles = {c1, c2};
  b.decode_step_s = {0.1, 0.2, 0.3};
  FinishBatch(10, &b);
  EXPECT_EQ(b.generated_tokens, 40);
  EXPECT_EQ(b.generate_tokens, 40);
  EXPECT_DOUBLE_EQ(b.timed_s, 4.0);
  EXPECT_DOUBLE_EQ(b.ms_per_token, 100.0);  // 4 s / 40 tokens
  EXPECT_DOUBLE_EQ(b.generate_s, 1.0);      // the first timed cycle
  EXPECT_DOUBLE_EQ(b.tokens_per_second, 10.0);
  EXPECT_DOUBLE_EQ(b.decode_tokens_per_second, 36.0 / 3.2);  // (40 - 2*2) tokens / 3.2 s
  EXPECT_DOUBLE_EQ(b.prefill_ms.mean, 300.0);                // 200 ms and 400 ms after tokenizing
  EXPECT_DOUBLE_EQ(b.decode_step_ms.p50, 200.0);
  EXPECT_DOUBLE_EQ(b.mean_kv_tokens_per_step, (3 + 5) + 2 * 5.0);
}

class BatchSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = FixturePath("models/bloom-tiny-h4");
    ModelRunnerOptions options;
    options.model_dir = dir;
    options.threads_per_rank = 2;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(BatchSweepTest, ExactTokenCountsAndMonotoneTimestamps) {
  BatchGenerator generator(runner_.get(), tokenizer_.get());
  SweepOptions options;
  options.batch_sizes = {1, 2, 4};
  options.max_new_tokens = 6;
  options.warmup = 1;
  options.cycles = 2;
  const auto origin = std::chrono::steady_clock::now();
  int callbacks = 0;
  absl::StatusOr<SweepRun> run = RunBatchSweep(&generator, tokenizer_.get(), options, origin,
                                               [&](const BatchResult&) { ++callbacks; });
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(callbacks, 3);
  ASSERT_EQ(run->batches.size(), 3u);
  double last = 0.0;
  for (size_t i = 0; i < 3; ++i) {
    const BatchResult& b = run->batches[i];
    const int32_t bs = options.batch_sizes[i];
    EXPECT_EQ(b.batch_size, bs);
    ASSERT_EQ(b.prompt_lengths.size(), static_cast<size_t>(bs));
    ASSERT_EQ(b.cycles.size(), 2u);
    EXPECT_EQ(b.generated_tokens, 2 * bs * 6);
    EXPECT_EQ(b.decode_step_s.size(), 2u * 5);  // the first token of each comes from prefill
    for (const CycleRecord& c : b.cycles) {
      EXPECT_EQ(c.generated_tokens, bs * 6);
      EXPECT_EQ(c.decode_steps, 5);
      EXPECT_LE(last, c.start_s);
      EXPECT_LE(c.start_s, c.tokenized_s);
      EXPECT_LE(c.tokenized_s, c.first_token_s);
      EXPECT_LE(c.first_token_s, c.prefill_done_s);
      EXPECT_LE(c.prefill_done_s, c.end_s);
      last = c.end_s;
    }
    // Prompts are the seed's, cycled: sequence 0 and (if present) 8 share a length.
    int64_t prompt_tokens = 0;
    for (int32_t p : b.prompt_lengths) prompt_tokens += p;
    EXPECT_EQ(b.cycles[0].prompt_tokens, prompt_tokens);
    EXPECT_GT(b.ms_per_token, 0.0);
    EXPECT_GT(b.tokens_per_second, 0.0);
    EXPECT_LE(b.decode_step_ms.p50, b.decode_step_ms.p90);
    EXPECT_LE(b.decode_step_ms.p90, b.decode_step_ms.p99);
  }
  // Batch 1 uses the first seed prompt only.
  EXPECT_EQ(run->batches[0].prompt_lengths[0],
            static_cast<int32_t>(tokenizer_->Encode(SeedPrompts()[0])->size()));
}

TEST_F(BatchSweepTest, FixedLengthPromptsOfTokenIds) {
  BatchGenerator generator(runner_.get(), tokenizer_.get());
  SweepOptions options;
  options.batch_sizes = {1, 3};
  options.max_new_tokens = 3;
  options.warmup = 0;
  options.cycles = 1;
  options.prompt_tokens = 40;
  options.prompts.clear();  // not needed with prompt_tokens
  absl::StatusOr<SweepRun> run =
      RunBatchSweep(&generator, tokenizer_.get(), options, std::chrono::steady_clock::now());
  ASSERT_TRUE(run.ok()) << run.status();
  for (const BatchResult& b : run->batches) {
    EXPECT_EQ(b.prompt_lengths, std::vector<int32_t>(b.batch_size, 40));
    EXPECT_EQ(b.cycles[0].prompt_tokens, 40 * b.batch_size);
    EXPECT_EQ(b.generated_tokens, 3 * b.batch_size);
  }
  options.prompt_tokens = -1;
  EXPECT_EQ(RunBatchSweep(&generator, tokenizer_.get(), options, std::chrono::steady_clock::now())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(BatchSweepTest, RejectsBadOptions) {
  BatchGenerator generator(runner_.get(), tokenizer_.get());
  const auto origin = std::chrono::steady_clock::now();
  SweepOptions options;
  options.batch_sizes = {0};
  EXPECT_FALSE(RunBatchSweep(&generator, tokenizer_.get(), options, origin).ok());
  options.batch_sizes = {1};
  options.cycles = 0;
  EXPECT_FALSE(RunBatchSweep(&generator, tokenizer_.get(), options, origin).ok());
  options.cycles = 1;
  options.max_new_tokens = 0;
  EXPECT_FALSE(RunBatchSweep(&generator, tokenizer_.get(), options, origin).ok());
}

}  // namespace
}  // namespace blossom
