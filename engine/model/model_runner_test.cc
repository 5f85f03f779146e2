// ModelRunner's "cuda" backend and KV sizing from device memory, on any machine.
//
// Without a GPU (CI, and every CPU-only machine): "cuda" fails cleanly, FailedPrecondition with
// CUDA's own reason in a build with the CUDA backend, Unimplemented in a build without
// (--config=nocuda or no toolkit); CPU runners refuse KvCacheBytesFromMemory with Unimplemented
// so callers fall back to a fixed budget.
// With GPUs (cases SKIPPED otherwise): the CUDA runner against the CPU runner on bloom-tiny-h4
// (fp32 weights: logits within 1e-4 max-abs, bloom_cuda_test's bound for fp32), KV sizing and
// allocation failures, logits kept on the GPU and sampled there (ForwardKeepLogits,
// MakeBatchSampler), and (two GPUs) NCCL tensor parallelism, with asynchronous and with
// synchronous collectives, including a failed step followed by a good one.
#include <algorithm>
#include <iostream>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/bloom_model.h"
#include "engine/model/model_runner.h"
#include "engine/sampling/batch_sampler.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/util/fixture_path.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace blossom {
namespace {

constexpr int32_t kBlockSize = 4;
constexpr float kCudaTolerance = 1e-4f;

ModelRunnerOptions Options(const std::string& backend, int tp) {
  ModelRunnerOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.backend = backend;
  options.tensor_parallel_size = tp;
  options.threads_per_rank = 1;
  options.prefetch = false;
  return options;
}

bool Contains(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

int VisibleGpus() {
#ifdef BLOSSOM_HAVE_CUDA
  return cuda::QueryDevices().count;
#else
  return 0;
#endif
}

TEST(ModelRunnerTest, CpuRunnersCannotSizeKvFromDeviceMemory) {
  for (int tp : {1, 2}) {
    auto runner = ModelRunner::Create(Options("cpu", tp));
    ASSERT_TRUE(runner.ok()) << runner.status();
    const absl::StatusOr<int64_t> bytes = (*runner)->KvCacheBytesFromMemory();
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kUnimplemented) << "tp " << tp;
    EXPECT_TRUE(Contains(bytes.status(), "fixed KV budget")) << bytes.status();
  }
  CpuBackend backend(1);
  auto model = BloomModel::Load(FixturePath("models/bloom-tiny-h4"), &backend, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(ModelRunner::ForModel(model->get())->KvCacheBytesFromMemory().status().code(),
            absl::StatusCode::kUnimplemented);
}

#ifdef BLOSSOM_HAVE_CUDA

TEST(ModelRunnerTest, CudaWithoutGpuFailsWithCudasReason) {
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count > 0) GTEST_SKIP() << "a GPU is visible (" << q.name << ")";
  ASSERT_FALSE(q.reason.empty());
  auto one = ModelRunner::Create(Options("cuda", 1));
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), absl::StatusCode::kFailedPrecondition) << one.status();
  EXPECT_TRUE(Contains(one.status(), "no usable GPU")) << one.status();
  EXPECT_TRUE(Contains(one.status(), q.reason)) << one.status();

  auto two = ModelRunner::Create(Options("cuda", 2));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), absl::StatusCode::kFailedPrecondition) << two.status();
  EXPECT_TRUE(Contains(two.status(), "tensor-parallel size 2 needs 2 GPUs, 0 visible"))
      << two.status();
  EXPECT_TRUE(Contains(two.status(), q.reason)) << two.status();
  // What an operator sees, in the test log.
  std::printf("tp 1: %s\ntp 2: %s\n", one.status().ToString().c_str(),
              two.status().ToString().c_str());
}

TEST(ModelRunnerTest, CudaTensorParallelNeedsOneGpuPerRank) {
  // One rank more than there are GPUs, whatever the machine has.
  const int gpus = VisibleGpus();
  auto runner = ModelRunner::Create(Options("cuda", gpus + 1));
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kFailedPrecondition) << runner.status();
  if (gpus > 0) {
    EXPECT_TRUE(Contains(runner.status(), absl::StrCat("tensor-parallel size ", gpus + 1,
                                                       " needs ", gpus + 1, " GPUs, ", gpus,
                                                       " visible")))
        << runner.status();
  }
}

TEST(ModelRunnerTest, GpuMemoryFractionMustBeAShare) {
  for (double fraction : {0.0, -0.5, 1.5, std::nan("")}) {
    ModelRunnerOptions options = Options("cuda", 1);
    options.gpu_memory_fraction = fraction;
    auto runner = ModelRunner::Create(options);
    EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument) << fraction;
    EXPECT_TRUE(Contains(runner.status(), "gpu_memory_fraction")) << runner.status();
  }
}

#else  // !BLOSSOM_HAVE_CUDA

TEST(ModelRunnerTest, CudaIsUnimplementedInABuildWithoutIt) {
  for (int tp : {1, 2}) {
    auto runner = ModelRunner::Create(Options("cuda", tp));
    EXPECT_EQ(runner.status().code(), absl::StatusCode::kUnimplemented) << runner.status();
    EXPECT_TRUE(Contains(runner.status(), "this build has no CUDA backend")) << runner.status();
  }
}

#endif  // BLOSSOM_HAVE_CUDA

// ---- With GPUs ----

const std::vector<int32_t>& Prompt() {
  static const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 1024, 7, 512, 33, 2047, 5};
  return prompt;
}

// A fresh KV cache for Prompt() on `runner`, and the step that prefills it with every row's
// logits.
StepBatch PrefillBatch(ModelRunner& runner) {
  const int32_t blocks = static_cast<int32_t>(Prompt().size()) / kBlockSize + 1;
  absl::Status allocated = runner.AllocateKvCache(blocks, kBlockSize);
  EXPECT_TRUE(allocated.ok()) << allocated;
  StepBatch batch;
  batch.max_blocks_per_seq = blocks;
  std::vector<int32_t> table(blocks);
  for (int32_t b = 0; b < blocks; ++b) table[b] = blocks - 1 - b;  // scattered
  batch.AddSequence(Prompt(), 0, table, true, /*all_logits=*/true);
  return batch;
}

// All-token logits of Prompt() in one prefill step.
std::vector<float> PrefillLogits(ModelRunner& runner) {
  const StepBatch batch = PrefillBatch(runner);
  std::vector<float> logits(batch.logit_rows.size() * runner.vocab_size());
  absl::Status status = runner.Forward(batch, logits.data());
  EXPECT_TRUE(status.ok()) << status;
  return logits;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

std::vector<float> CpuReference() {
  auto cpu = ModelRunner::Create(Options("cpu", 1));
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  return cpu.ok() ? PrefillLogits(**cpu) : std::vector<float>();
}

// --quantize reaches every rank: a tensor-parallel int8 runner packs its slices (the row-parallel
// slices of 32 columns are whole quantization blocks, so only the fp32 split of the partial sums
// differs from one rank) and its logits match the single-rank int8 runner's.
// The same for bf16 (bf16_panel_tile.h): the row-parallel slices' sums are split in fp32.
TEST(ModelRunnerTest, QuantizedCpuRunnersAgreeAcrossTensorParallelSizes) {
  std::vector<float> fp32 = CpuReference();
  for (WeightQuant quant : {WeightQuant::kInt8, WeightQuant::kBf16}) {
    std::vector<std::vector<float>> quantized;
    for (int tp : {1, 2}) {
      ModelRunnerOptions options = Options("cpu", tp);
      options.quantize = quant;
      auto runner = ModelRunner::Create(options);
      ASSERT_TRUE(runner.ok()) << runner.status();
      EXPECT_EQ((*runner)->info().quantize, quant);
      quantized.push_back(PrefillLogits(**runner));
    }
    EXPECT_LT(MaxAbsDiff(quantized[0], quantized[1]), 1e-4f) << WeightQuantName(quant);
    EXPECT_GT(MaxAbsDiff(quantized[0], fp32), 0.0f)
        << "the " << WeightQuantName(quant) << " runner must not compute in fp32";
  }
}

// --kv-cache-dtype bf16 on the CPU: half the KV bytes per block, logits close to the fp32 cache's
// (K and V rounded to bf16: 0.97% of the largest logit on this random model) but not equal, tensor-parallel ranks agreeing;
// a dtype the backend cannot keep beside its activations is refused before the weights load.
TEST(ModelRunnerTest, CpuRunnerKeepsABf16KvCache) {
  std::vector<float> fp32 = CpuReference();
  auto fp32_runner = ModelRunner::Create(Options("cpu", 1));
  ASSERT_TRUE(fp32_runner.ok()) << fp32_runner.status();
  std::vector<std::vector<float>> logits;
  for (int tp : {1, 2}) {
    ModelRunnerOptions options = Options("cpu", tp);
    options.kv_cache_dtype = DType::kBF16;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    EXPECT_EQ((*runner)->info().kv_cache_dtype, DType::kBF16);
    if (tp == 1) {
      EXPECT_EQ(2 * (*runner)->KvBytesPerBlock(kBlockSize), (*fp32_runner)->KvBytesPerBlock(kBlockSize));
    }
    logits.push_back(PrefillLogits(**runner));
  }
  const float diff = MaxAbsDiff(logits[0], fp32);
  float scale = 0.0f;
  for (float v : fp32) scale = std::max(scale, std::fabs(v));
  std::cout << "bf16 KV cache: max |logit difference| " << diff << " (max |logit| " << scale << ")\n";
  EXPECT_GT(diff, 0.0f) << "the bf16 cache must round K and V";
  EXPECT_LT(diff, 0.02f * scale);  // measured 0.97% (0.068 of 7.0)
  EXPECT_LT(MaxAbsDiff(logits[0], logits[1]), 1e-4f);
  ModelRunnerOptions f16 = Options("cpu", 1);
  f16.kv_cache_dtype = DType::kF16;
  auto refused = ModelRunner::Create(f16);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--kv-cache-dtype f16"), std::string::npos) << refused.status();
}

TEST(ModelRunnerTest, CudaRunnerMatchesCpuAndSizesKvFromMemory) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  auto runner = ModelRunner::Create(Options("cuda", 1));
  ASSERT_TRUE(runner.ok()) << runner.status();
  ModelRunner& gpu = **runner;
  EXPECT_EQ(gpu.info().backend, "cuda");
  EXPECT_LE(MaxAbsDiff(PrefillLogits(gpu), CpuReference()), kCudaTolerance);

  const absl::StatusOr<int64_t> budget = gpu.KvCacheBytesFromMemory();
  ASSERT_TRUE(budget.ok()) << budget.status();
  const int64_t per_block = static_cast<int64_t>(gpu.KvBytesPerBlock(16));
  const int64_t blocks =
      std::min<int64_t>(*budget / per_block, std::numeric_limits<int32_t>::max());
  ASSERT_GT(blocks, 0);
  absl::Status allocated = gpu.AllocateKvCache(static_cast<int32_t>(blocks), 16);
  ASSERT_TRUE(allocated.ok()) << allocated;
  // The pool just allocated counts as free (AllocateKvCache would replace it).
  const absl::StatusOr<int64_t> again = gpu.KvCacheBytesFromMemory();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(*again, *budget / 2);

  // Far more than any GPU holds: a clear error, and no cache left behind.
  absl::Status too_big = gpu.AllocateKvCache(std::numeric_limits<int32_t>::max(), 16);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted) << too_big;
  EXPECT_TRUE(Contains(too_big, "KV cache of")) << too_big;
  StepBatch batch;
  batch.max_blocks_per_seq = 1;
  std::vector<int32_t> table = {0};
  batch.AddSequence({5}, 0, table, true);
  std::vector<float> logits(gpu.vocab_size());
  EXPECT_EQ(gpu.Forward(batch, logits.data()).code(), absl::StatusCode::kFailedPrecondition);
}

// Device sampling's runner half on CUDA (tp 1, and tp 2 with two GPUs): ForwardKeepLogits leaves
// the logits in GPU memory (the same values Forward copies out), CopyLogitsToHost brings rows
// back, and MakeBatchSampler's CUDA sampler reads them in place: greedy rows give the host
// sampler's token on the same bits, a logprobs row (scored on the device) its token, and its
// logprobs to 1e-5 (the device sums the same fp32 weights in another order) with the same ids.
TEST(ModelRunnerTest, CudaKeptLogitsStayOnTheGpuAndItsSamplerReadsThem) {
  const int gpus = VisibleGpus();
  if (gpus < 1) GTEST_SKIP() << "needs a GPU";
  for (int tp = 1; tp <= std::min(gpus, 2); ++tp) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    auto runner = ModelRunner::Create(Options("cuda", tp));
    ASSERT_TRUE(runner.ok()) << runner.status();
    ModelRunner& gpu = **runner;
    const StepBatch batch = PrefillBatch(gpu);
    const int64_t rows = static_cast<int64_t>(batch.logit_rows.size()), vocab = gpu.vocab_size();
    std::vector<float> host(rows * vocab);
    ASSERT_TRUE(gpu.Forward(batch, host.data()).ok());
    const absl::StatusOr<Tensor> kept = gpu.ForwardKeepLogits(batch);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(kept->device, DeviceKind::kCuda);
    ASSERT_EQ(kept->dim(0), rows);
    ASSERT_EQ(kept->dim(1), vocab);
    std::vector<float> copied(rows * vocab);
    ASSERT_TRUE(gpu.CopyLogitsToHost(*kept, copied.data()).ok());
    EXPECT_LE(MaxAbsDiff(copied, host), kCudaTolerance);
    EXPECT_LE(MaxAbsDiff(copied, CpuReference()), kCudaTolerance);

    absl::StatusOr<std::unique_ptr<BatchSampler>> sampler = gpu.MakeBatchSampler();
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    EXPECT_EQ((*sampler)->name(), "cuda");
    SamplingParams greedy, with_logprobs;
    greedy.temperature = 0.0f;
    with_logprobs.temperature = 0.0f;
    with_logprobs.logprobs = 2;
    std::vector<RequestRng> rngs;
    for (int64_t r = 0; r < rows; ++r) rngs.emplace_back(uint64_t{1});
    std::vector<SampleRow> sample_rows(rows);
    for (int64_t r = 0; r < rows; ++r) {
      sample_rows[r].logit_row = r;
      sample_rows[r].params = r == rows - 1 ? &with_logprobs : &greedy;
      sample_rows[r].rng = &rngs[r];
    }
    std::vector<absl::StatusOr<SampleResult>> on_gpu, on_host;
    ASSERT_TRUE((*sampler)->SampleBatch(*kept, sample_rows, &on_gpu).ok());
    HostBatchSampler reference;
    ASSERT_TRUE(reference
                    .SampleBatch(Tensor(copied.data(), DType::kF32, {rows, vocab}), sample_rows,
                                 &on_host)
                    .ok());
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(on_gpu[r].ok() && on_host[r].ok()) << r;
      EXPECT_EQ(on_gpu[r]->token, on_host[r]->token) << r;
    }
    const SampleResult& scored = *on_gpu[rows - 1];
    const SampleResult& want = *on_host[rows - 1];
    EXPECT_NEAR(scored.logprob, want.logprob, 1e-5);
    ASSERT_EQ(scored.top.size(), want.top.size());
    for (size_t t = 0; t < want.top.size(); ++t) {
      EXPECT_EQ(scored.top[t].token, want.top[t].token) << "rank " << t;
      EXPECT_NEAR(scored.top[t].logprob, want.top[t].logprob, 1e-5) << "rank " << t;
    }
    sampler->reset();  // before the runner: its calls go to rank 0's thread
  }
  if (gpus < 2) std::printf("tp 2 not run: %d GPU visible\n", gpus);
}

// Both NCCL modes: asynchronous (collectives on each rank's backend stream, one fence per step;
// the default) and synchronous (--nccl_async_collectives=false).
TEST(ModelRunnerTest, CudaTensorParallelMatchesCpuAndRecoversFromAFailedStep) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (bool async : {true, false}) {
    SCOPED_TRACE(async ? "asynchronous collectives" : "synchronous collectives");
    ModelRunnerOptions options = Options("cuda", 2);
    options.nccl_async_collectives = async;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    ModelRunner& gpu = **runner;
    EXPECT_EQ(gpu.world_size(), 2);
    const std::vector<float> reference = CpuReference();
    EXPECT_LE(MaxAbsDiff(PrefillLogits(gpu), reference), kCudaTolerance);

    const absl::StatusOr<int64_t> budget = gpu.KvCacheBytesFromMemory();
    ASSERT_TRUE(budget.ok()) << budget.status();
    EXPECT_GT(*budget, 0);

    // A step every rank refuses (token outside the vocabulary): the NCCL communicators are
    // aborted and rebuilt, and the next step runs.
    StepBatch bad;
    bad.max_blocks_per_seq = 1;
    std::vector<int32_t> table = {0};
    bad.AddSequence({static_cast<int32_t>(gpu.vocab_size())}, 0, table, true);
    std::vector<float> logits(gpu.vocab_size());
    const absl::Status refused = gpu.Forward(bad, logits.data());
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_LE(MaxAbsDiff(PrefillLogits(gpu), reference), kCudaTolerance);
  }
}

}  // namespace
}  // namespace blossom
