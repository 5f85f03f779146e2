// The sampler a runner hands out for its kept logits: the host sampler for host memory (never
// bound to a thread: it calls no backend), and a bound sampler that makes every call, and its own
// destruction, on the backend's thread with the results of the unbound one. The CUDA case reports
// SKIPPED without a GPU (or in a build without the CUDA backend).
#include "engine/model/runner_sampler.h"

#include <random>
#include <thread>
#include <vector>

#include "engine/model/rank_thread.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#endif

namespace blossom {
namespace {

constexpr int64_t kVocab = 97;

TEST(RunnerSamplerTest, HostMemoryGetsTheHostSamplerUnbound) {
  CpuBackend backend(1);
  absl::StatusOr<std::unique_ptr<BatchSampler>> direct = MakeSamplerForBackend(&backend);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ((*direct)->name(), "host");
  int runs = 0;
  absl::StatusOr<std::unique_ptr<BatchSampler>> on_thread = MakeSamplerOnBackendThread(
      &backend, [&](const std::function<absl::Status()>& fn) {
        ++runs;
        return fn();
      });
  ASSERT_TRUE(on_thread.ok()) << on_thread.status();
  EXPECT_EQ((*on_thread)->name(), "host");
  on_thread->reset();
  EXPECT_EQ(runs, 0) << "a host sampler calls no backend, so nothing is handed to its thread";
}

TEST(RunnerSamplerTest, BoundSamplerRunsOnTheBackendThreadWithTheSameResults) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t rows = 3;
  std::vector<float> logits(rows * kVocab);
  for (float& x : logits) x = normal(gen);
  const Tensor tensor(logits.data(), DType::kF32, {rows, kVocab});
  std::vector<SamplingParams> params(rows);
  params[0].temperature = 0.0f;
  params[0].logprobs = 2;
  params[1].temperature = 0.9f;
  params[1].top_k = 20;
  params[2].temperature = 1.1f;
  params[2].repetition_penalty = 1.2f;
  params[2].logprobs = 0;
  const std::vector<int32_t> prompt = {1, 5, 9}, output = {4};
  auto sample = [&](BatchSampler& sampler) {
    std::vector<RequestRng> rngs;
    for (int64_t i = 0; i < rows; ++i) rngs.emplace_back(uint64_t{40} + i);
    std::vector<SampleRow> sample_rows(rows);
    for (int64_t i = 0; i < rows; ++i) {
      sample_rows[i].logit_row = rows - 1 - i;
      sample_rows[i].params = &params[i];
      sample_rows[i].context.prompt_tokens = prompt;
      sample_rows[i].context.output_tokens = output;
      sample_rows[i].rng = &rngs[i];
    }
    std::vector<absl::StatusOr<SampleResult>> results;
    EXPECT_TRUE(sampler.SampleBatch(tensor, sample_rows, &results).ok());
    return results;
  };

  HostBatchSampler plain;
  const std::vector<absl::StatusOr<SampleResult>> want = sample(plain);

  RankThread backend_thread;
  std::vector<std::thread::id> ran_on;
  RunOnBackendThread run = [&](const std::function<absl::Status()>& fn) {
    return backend_thread.Run([&] {
      ran_on.push_back(std::this_thread::get_id());
      return fn();
    });
  };
  std::unique_ptr<BatchSampler> bound =
      BindSamplerToThread(std::make_unique<HostBatchSampler>(), run);
  EXPECT_EQ(bound->name(), "host");
  const std::vector<absl::StatusOr<SampleResult>> got = sample(*bound);
  ASSERT_EQ(ran_on.size(), 1u) << "one hand-off per SampleBatch";
  bound.reset();
  ASSERT_EQ(ran_on.size(), 2u) << "destroyed on the backend's thread too";
  for (const std::thread::id& id : ran_on) EXPECT_NE(id, std::this_thread::get_id());

  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].ok() && want[i].ok()) << i;
    EXPECT_EQ(got[i]->token, want[i]->token) << i;
    EXPECT_EQ(got[i]->logprob, want[i]->logprob) << i;
    ASSERT_EQ(got[i]->top.size(), want[i]->top.size()) << i;
    for (size_t j = 0; j < got[i]->top.size(); ++j) {
      EXPECT_EQ(got[i]->top[j].token, want[i]->top[j].token);
      EXPECT_EQ(got[i]->top[j].logprob, want[i]->top[j].logprob);
    }
  }
}

TEST(RunnerSamplerTest, CudaBackendGetsTheCudaSampler) {
#ifdef BLOSSOM_HAVE_CUDA
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create();
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<std::unique_ptr<BatchSampler>> sampler = MakeSamplerForBackend(backend->get());
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  EXPECT_EQ((*sampler)->name(), "cuda");
#else
  GTEST_SKIP() << "built without the CUDA backend (--config=nocuda or no /usr/local/cuda)";
#endif
}

}  // namespace
}  // namespace blossom
