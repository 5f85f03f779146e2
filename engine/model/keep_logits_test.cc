// ModelRunner::ForwardKeepLogits against Forward into a host buffer, on the CPU backend: the same
// bits for every runner (tp 1 wrapping a caller's model, tp 1 from Create, the threads runner at
// tp 2, and at tp 3, whose vocabulary slices are unequal: 2048 = 683 + 683 + 682), for a prefill
// step with every row's logits, a mixed step and a step that wants none. Also what the engine
// reads them with: the host sampler, and rows copied through rank 0's backend.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/bloom_model.h"
#include "engine/model/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

constexpr int32_t kBlockSize = 4;
constexpr int32_t kBlocks = 32;

struct RunnerCase {
  std::string name;
  std::string model;
  int tp;
  bool for_model;  // ModelRunner::ForModel around a caller's model, instead of Create
};

void PrintTo(const RunnerCase& c, std::ostream* os) { *os << c.name; }

class KeepLogitsTest : public ::testing::TestWithParam<RunnerCase> {
 protected:
  void SetUp() override {
    const RunnerCase& c = GetParam();
    const std::string dir = FixturePath("models/" + c.model);
    if (c.for_model) {
      auto model = BloomModel::Load(dir, &backend_, nullptr);
      ASSERT_TRUE(model.ok()) << model.status();
      model_ = std::move(*model);
      runner_ = ModelRunner::ForModel(model_.get());
    } else {
      ModelRunnerOptions options;
      options.model_dir = dir;
      options.tensor_parallel_size = c.tp;
      options.threads_per_rank = 1;
      options.prefetch = false;
      auto runner = ModelRunner::Create(options);
      ASSERT_TRUE(runner.ok()) << runner.status();
      runner_ = std::move(*runner);
    }
  }

  // The steps both variants run: a prefill with every row's logits, then two sequences (a
  // decode token and a prompt chunk wanting only its last row), then a chunk wanting none.
  static std::vector<StepBatch> Steps() {
    std::vector<StepBatch> steps(3);
    const std::vector<int32_t> a = {1, 17, 250, 3, 99, 1024, 7, 512, 33, 2047, 5};
    const std::vector<int32_t> b = {8, 8, 300, 41, 1999, 6};
    const std::vector<int32_t> table_a = {5, 2, 9, 0}, table_b = {7, 1, 3, 4};
    for (StepBatch& s : steps) s.max_blocks_per_seq = 4;
    steps[0].AddSequence(a, 0, table_a, true, /*all_logits=*/true);
    steps[1].AddSequence({42}, static_cast<int32_t>(a.size()), table_a, true);
    steps[1].AddSequence(absl::MakeConstSpan(b).subspan(0, 4), 0, table_b, true);
    steps[2].AddSequence(absl::MakeConstSpan(b).subspan(4), 4, table_b, false);
    return steps;
  }

  CpuBackend backend_{1};
  std::unique_ptr<BloomModel> model_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(KeepLogitsTest, NeedsAKvCache) {
  const StepBatch step = Steps()[0];
  EXPECT_EQ(runner_->ForwardKeepLogits(step).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(KeepLogitsTest, SameBitsAsForwardIntoAHostBuffer) {
  ASSERT_TRUE(runner_->AllocateKvCache(kBlocks, kBlockSize).ok());
  // Both variants assemble the ranks' vocabulary slices the same way, so a misplaced slice
  // would agree with itself: the single-rank model is the independent reference (within
  // tensor_parallel_test's bound for a changed summation order; exact at tp 1).
  auto reference_model =
      BloomModel::Load(FixturePath("models/" + GetParam().model), &backend_, nullptr);
  ASSERT_TRUE(reference_model.ok()) << reference_model.status();
  std::unique_ptr<ModelRunner> reference = ModelRunner::ForModel(reference_model->get());
  ASSERT_TRUE(reference->AllocateKvCache(kBlocks, kBlockSize).ok());
  const float tolerance = GetParam().tp == 1 ? 0.0f : 1e-4f;
  const int64_t vocab = runner_->vocab_size();
  for (const StepBatch& step : Steps()) {
    const int64_t rows = static_cast<int64_t>(step.logit_rows.size());
    // Each step runs twice on the same positions (the KV written is the same both times).
    std::vector<float> host(std::max<int64_t>(1, rows) * vocab, -7.0f);
    std::vector<float> single(host.size(), -7.0f);
    ASSERT_TRUE(runner_->Forward(step, host.data()).ok());
    ASSERT_TRUE(reference->Forward(step, single.data()).ok());
    float worst = 0.0f;
    for (int64_t i = 0; i < rows * vocab; ++i) {
      worst = std::max(worst, std::fabs(host[i] - single[i]));
    }
    EXPECT_LE(worst, tolerance) << "against the single-rank model";
    absl::StatusOr<Tensor> kept = runner_->ForwardKeepLogits(step);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(kept->dtype, DType::kF32);
    ASSERT_EQ(kept->rank, 2);
    ASSERT_EQ(kept->dim(0), rows);
    ASSERT_EQ(kept->dim(1), vocab);
    EXPECT_EQ(kept->device, DeviceKind::kHost) << "the cpu backend's memory is host memory";
    if (rows == 0) continue;
    EXPECT_EQ(std::memcmp(kept->data, host.data(), rows * vocab * sizeof(float)), 0);
    // What the engine does for prompt logprobs when the logits are on a device.
    const int64_t first = rows > 1 ? 1 : 0;
    std::vector<float> copied((rows - first) * vocab, -7.0f);
    ASSERT_TRUE(runner_->CopyLogitsToHost(kept->Rows(first, rows), copied.data()).ok());
    EXPECT_EQ(std::memcmp(copied.data(), host.data() + first * vocab,
                          copied.size() * sizeof(float)),
              0);
  }
}

TEST_P(KeepLogitsTest, TheSamplerReadsTheKeptLogits) {
  absl::StatusOr<std::unique_ptr<BatchSampler>> sampler = runner_->MakeBatchSampler();
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  EXPECT_EQ((*sampler)->name(), "host");
  ASSERT_TRUE(runner_->AllocateKvCache(kBlocks, kBlockSize).ok());
  const StepBatch step = Steps()[0];
  const int64_t rows = static_cast<int64_t>(step.logit_rows.size());
  std::vector<float> host(rows * runner_->vocab_size());
  ASSERT_TRUE(runner_->Forward(step, host.data()).ok());
  absl::StatusOr<Tensor> kept = runner_->ForwardKeepLogits(step);
  ASSERT_TRUE(kept.ok()) << kept.status();
  // Greedy with logprobs on every row: the kept logits and the host copy agree exactly.
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = 3;
  std::vector<RequestRng> rngs;
  for (int64_t r = 0; r < rows; ++r) rngs.emplace_back(uint64_t{1});
  std::vector<SampleRow> sample_rows(rows);
  for (int64_t r = 0; r < rows; ++r) {
    sample_rows[r].logit_row = r;
    sample_rows[r].params = &params;
    sample_rows[r].rng = &rngs[r];
  }
  std::vector<absl::StatusOr<SampleResult>> from_kept, from_host;
  ASSERT_TRUE((*sampler)->SampleBatch(*kept, sample_rows, &from_kept).ok());
  HostBatchSampler reference;
  ASSERT_TRUE(reference
                  .SampleBatch(Tensor(host.data(), DType::kF32, {rows, runner_->vocab_size()}),
                               sample_rows, &from_host)
                  .ok());
  ASSERT_EQ(from_kept.size(), static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_TRUE(from_kept[r].ok() && from_host[r].ok()) << r;
    EXPECT_EQ(from_kept[r]->token, from_host[r]->token) << r;
    EXPECT_EQ(from_kept[r]->logprob, from_host[r]->logprob) << r;
    ASSERT_EQ(from_kept[r]->top.size(), 3u);
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(from_kept[r]->top[j].token, from_host[r]->top[j].token);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Runners, KeepLogitsTest,
                         ::testing::Values(RunnerCase{"for_model", "bloom-tiny-h4", 1, true},
                                           RunnerCase{"tp1", "bloom-tiny-h4", 1, false},
                                           RunnerCase{"tp2", "bloom-tiny-h4", 2, false},
                                           RunnerCase{"tp3_unequal_vocab", "bloom-tiny-h6", 3,
                                                      false}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace blossom
