#include "engine/model/rank_setup.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

// Set by engine/model/BUILD exactly where //kernels/cuda is built (a toolkit at /usr/local/cuda
// and no --config=nocuda); these headers include no CUDA header.
#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#endif

namespace blossom {
namespace {

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

#ifdef BLOSSOM_HAVE_CUDA
double GiB(double bytes) { return bytes / (1 << 30); }

// Held back from the KV pool for what the forward allocates after KvCacheBytesFromMemory (see
// the header): BloomModel's step workspace grows lazily to max(step, 2 * capacity), so reserving
// twice the scheduler's largest step covers it.
constexpr int64_t kReserveTokens = 8192;
constexpr int64_t kReserveLogitRows = 512;
constexpr int64_t kReserveSlackBytes = 512ll << 20;

// Bytes of BloomModel's workspace (EnsureWorkspace) for kReserveTokens tokens and
// kReserveLogitRows logit rows on one rank of `world`.
int64_t ActivationReserveBytes(const BloomModel& model, DType activation, int world) {
  const BloomConfig& c = model.config();
  const int64_t act = static_cast<int64_t>(DTypeSize(activation));
  const int64_t h = c.hidden_size, local = model.local_heads() * c.head_dim();
  const int64_t i32 = static_cast<int64_t>(sizeof(int32_t));
  // hidden, attn_out, ln; qkv; q, ctx; the MLP slice; ids, slots, query_start, context_len.
  const int64_t per_token = act * (3 * h + 3 * local + 2 * local + c.ffn_hidden_size() / world) +
                            4 * i32;
  // gathered, gathered_ln; fp32 local and all-gathered logits (the largest vocabulary slice)
  // and, under tensor parallelism, those assembled into full rows (on the leader only; counted
  // on every rank, which is conservative); the row index.
  const int64_t vocab_local_max = SliceForRank(c.vocab_size, 0, world).size();
  const int64_t assembled = world > 1 ? c.vocab_size : 0;
  const int64_t per_row = act * 2 * h + 4 * (vocab_local_max * (1 + world) + assembled) + i32;
  return kReserveTokens * per_token + kReserveLogitRows * per_row + kReserveSlackBytes;
}
#endif  // BLOSSOM_HAVE_CUDA

}  // namespace

void LogWeights(const ModelInfo& info) {
  spdlog::info("model rank {}/{}: weights {:.2f} MiB ({}, quantize {}, KV cache {}, backend {})",
               info.rank, info.world_size, MiB(info.weight_bytes_this_rank), DTypeName(info.weight_dtype),
               absl::StrCat(WeightQuantName(info.quantize), info.quantize_lm_head ? " + lm head" : ""),
               DTypeName(info.kv_cache_dtype), info.backend);
  if (info.rank == 0 && info.quantize == WeightQuant::kBf16 && info.backend == "cpu" &&
      !CpuHasAvx512Bf16()) {
    spdlog::warn("--quantize bf16: this CPU has no AVX512-BF16, so the bf16 GEMM runs its portable "
                 "reference kernel (the same results, many times slower than --quantize none)");
  }
}

void LogKv(int rank, int world, int32_t num_blocks, int32_t block_size, size_t per_block) {
  spdlog::info("model rank {}/{}: KV cache {} blocks x {} tokens = {:.2f} MiB", rank, world,
               num_blocks, block_size, MiB(static_cast<uint64_t>(per_block) * num_blocks));
}

absl::Status KvAllocationError(const absl::Status& error, int32_t num_blocks, int32_t block_size,
                               size_t per_block) {
  return absl::Status(
      error.code(),
      absl::StrCat("KV cache of ", num_blocks, " blocks x ", block_size, " tokens (",
                   static_cast<uint64_t>(per_block) * std::max(num_blocks, 0),
                   " bytes per rank) cannot be allocated: ", error.message()));
}


absl::StatusOr<int64_t> KvBudgetOnRank(Backend* backend, const BloomModel& model, int world,
                                       double fraction, int64_t kv_bytes_now) {
#ifdef BLOSSOM_HAVE_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(backend)) {
    BLOSSOM_ASSIGN_OR_RETURN(const size_t total, cuda->TotalDeviceMemory());
    BLOSSOM_ASSIGN_OR_RETURN(const size_t free_now, cuda->FreeDeviceMemory());
    const double in_use = static_cast<double>(total) - static_cast<double>(free_now) -
                          static_cast<double>(kv_bytes_now);
    const double reserve = static_cast<double>(
        ActivationReserveBytes(model, cuda->activation_dtype(model.info().weight_dtype), world));
    const double budget = fraction * static_cast<double>(total) - in_use - reserve;
    if (budget < 1.0) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no GPU memory left for the KV cache on %s: gpu_memory_fraction %.3f of %.2f GiB "
          "= %.2f GiB, of which %.2f GiB are in use (weights, CUDA/NCCL contexts, workspaces) "
          "and %.2f GiB are reserved for activations; raise gpu_memory_fraction or use more "
          "tensor-parallel ranks",
          cuda->device_name(), fraction, GiB(static_cast<double>(total)),
          GiB(fraction * static_cast<double>(total)), GiB(in_use), GiB(reserve)));
    }
    return static_cast<int64_t>(budget);
  }
#else
  (void)model;
  (void)world;
  (void)fraction;
  (void)kv_bytes_now;
#endif
  return absl::UnimplementedError(
      absl::StrCat("KvCacheBytesFromMemory: the ", backend->name(),
                   " backend has no device memory to size the KV cache from; use a fixed KV "
                   "budget"));
}

#ifdef BLOSSOM_HAVE_CUDA
absl::Status CheckVisibleGpus(int tp) {
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count >= tp) return absl::OkStatus();
  const std::string why = q.reason.empty() ? "" : absl::StrCat(": ", q.reason);
  if (tp == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("backend cuda: no usable GPU is visible", why));
  }
  return absl::FailedPreconditionError(absl::StrCat("tensor-parallel size ", tp, " needs ", tp,
                                                    " GPUs, ", q.count, " visible", why));
}
#endif  // BLOSSOM_HAVE_CUDA

}  // namespace blossom
