// Runs the BLOOM forward on every tensor-parallel rank: what the engine and the offline generator
// drive, so the scheduler runs once and every rank executes the same step plan.
//
// With tensor_parallel_size 1 the runner is a thin wrapper over one BloomModel, its Backend and
// its KV cache, and Forward runs on the caller's thread. With tp > 1 it starts one thread per
// rank; each rank thread owns its Backend, its communicator, its BloomModel slice and its KV
// cache, and only ever touches its own:
//  - backend "cpu": a CpuBackend with threads_per_rank threads per rank, and one in-process
//    ThreadCommunicatorGroup for all ranks;
//  - backend "cuda": a CudaBackend on GPU `rank` per rank (tp 1: GPU 0), and NCCL communicators
//    (NcclCommunicator::CreateAll, one process, one thread per GPU). Every CUDA call of a rank is
//    made on its thread, whose current device is that rank's GPU.
// Forward hands the step to every rank and waits: the ranks run the same collectives in the same
// order, rank 0's full logits are returned. ForwardKeepLogits runs the same step but leaves rank
// 0's full logits in rank 0's backend memory (device memory on "cuda", no copy to the host);
// MakeBatchSampler's sampler samples and scores them there (prompt logprobs too), and
// CopyLogitsToHost brings back rows a caller must read itself (tests, tools). If any rank fails, the group is aborted so no other
// rank waits forever on a collective, and the step returns the first rank's error (the one that
// caused the abort); the group is re-armed afterwards (NCCL: new communicators), once every rank
// has returned, so the next step can run.
//
// Launcher "mpi" (one process per rank, started by Open MPI's mpirun, on one machine or
// several): every process calls Create with the same options and becomes rank r of
// MPI_COMM_WORLD, holding only its own slice. Rank 0, the leader (is_leader()), is driven like
// any runner: before running each AllocateKvCache, KvCacheBytesFromMemory (CUDA) and Forward on
// its slice it broadcasts the step plan over MPI, so the scheduler runs once, in the leader's
// process. The other ranks, the followers, call RunFollower, which executes those plans (the
// model's collectives pair up with the leader's: MPI for "cpu", NCCL with the unique id
// broadcast over MPI for "cuda") until the leader's runner is destroyed. Start-up and KV
// allocation failures reach every rank (the first failing rank's error); a bad step fails on
// every rank alike and the next works; a rank that dies or hangs inside a step makes the
// leader's Forward fail when the collective times out (an MPI/NCCL error sooner), after which
// every Forward fails with FailedPrecondition (the job must be restarted). Plain mpirun ends the
// whole job as soon as one process dies.
//
// "cuda" needs a build with the CUDA backend (the default where /usr/local/cuda exists); a build
// with --config=nocuda or without the toolkit refuses it with Unimplemented.
//
// Thread-safety: config(), info(), world_size() and KvBytesPerBlock() may be called from any
// thread. AllocateKvCache, KvCacheBytesFromMemory, Forward, ForwardKeepLogits, CopyLogitsToHost,
// MakeBatchSampler and the sampler's calls must be made by one thread at a time (the engine
// thread); the runner makes rank 0's backend calls on the thread that owns it. The KV cache
// belongs to one user (an Engine or a BatchGenerator), never two at once.
#ifndef BLOSSOM_ENGINE_MODEL_MODEL_RUNNER_H_
#define BLOSSOM_ENGINE_MODEL_MODEL_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"
#include "engine/model/bloom_model.h"
#include "engine/sampling/batch_sampler.h"
#include "kernels/tensor.h"

namespace blossom {

// Backend "cuda": the kernel choices of each rank's CudaBackend, one field per
// CudaBackend::Options field of the same name (see there; cuda_kernel_options.h copies them).
// Plain fields here, so that this header needs no CUDA.
struct CudaKernelOptions {
  bool tensor_core_attention = true;  // prefill attention on tensor cores
  bool mma_prefill_attention = true;  // ... on the mma.sync kernel (false: WMMA)
  bool skinny_gemm = true;            // decode-sized linears on the skinny GEMM where faster
  bool skinny_split_k = false;        // its split-K variant as a candidate too
  bool skinny_mma = false;            // its tensor-core variant (up to 16 rows) as a candidate too
  int32_t decode_attention_threads = 128;  // 128, 256 or 512
  bool register_layernorm = false;
  bool programmatic_launch = false;
};

struct ModelRunnerOptions {
  std::string model_dir;
  std::string backend = "cpu";
  int tensor_parallel_size = 1;
  int threads_per_rank = 0;  // 0 = hardware threads / tp
  bool prefetch = true;
  // Refuse checkpoints with tensors a BLOOM model does not use (ModelLoadOptions::strict_load).
  bool strict_load = false;
  // Quantize the Linear weights at load (ModelLoadOptions::quantize). The cpu backend packs them;
  // "cuda" refuses anything but kNone with Unimplemented (Backend::ImportLinearWeight).
  WeightQuant quantize = WeightQuant::kNone;
  bool quantize_lm_head = false;  // ModelLoadOptions::quantize_lm_head
  // The KV cache's dtype (ModelLoadOptions::kv_cache_dtype); unset: the activation dtype.
  std::optional<DType> kv_cache_dtype;
  // A PEFT LoRA adapter merged into the weights at load (ModelLoadOptions::lora_adapter).
  std::string lora_adapter;
  // backend "cuda": the share of each GPU's total memory the runner may fill, weights and KV
  // cache included; KvCacheBytesFromMemory sizes the KV pool from it. In (0, 1].
  double gpu_memory_fraction = 0.90;
  // How the ranks run: "threads" (one process, a thread per rank) or "mpi" (a process per rank
  // under mpirun; tensor_parallel_size must equal the MPI world size).
  std::string launcher = "threads";
  // Launcher "mpi": how long a rank waits in one collective for the others (a rank that died or
  // hangs) before the step fails. Larger than the slowest step's compute imbalance. > 0.
  double collective_timeout_seconds = 300.0;
  // Backend "cuda", launcher "threads", tp > 1: NCCL collectives ordered on each rank's compute
  // stream, with one bounded wait per step (Communicator::Fence) instead of two host waits per
  // collective. false: every collective waits for the backend and then for itself (the slower
  // mode, kept as a fallback). Launcher "mpi" always uses the synchronous mode today.
  bool nccl_async_collectives = true;
  // Decode steps replayed from captured graphs (BloomModel::EnableStepGraphs): CUDA graphs on
  // "cuda"; recorded op lists on "cpu" (no speed-up there: it is how tests run the graph path).
  // tp 1 only for now (collectives are not captured): with tp > 1 it is logged and ignored.
  bool step_graphs = false;
  StepGraphOptions step_graph_options;
  // Backend "cuda", tp 1: order each cuBLASLt plan's candidate algorithms by timing them on the
  // plan's first call (CudaBackend::Options::time_gemm_candidates), which WarmUp makes for every
  // plan a step can use. Off: the heuristic's order.
  bool time_gemm_candidates = false;
  // Backend "cuda": the kernel choices every rank's CudaBackend gets.
  CudaKernelOptions cuda_kernels;
};

class ModelRunner {
 public:
  // Loads the model for every rank (launcher "mpi": for this process's rank; every process of
  // the job must call it). InvalidArgument for an unknown backend or launcher, a non-positive
  // tp, a tp other than the MPI world size (launcher "mpi"), a gpu_memory_fraction outside
  // (0, 1] ("cuda"), or a model whose heads do not divide by tp. "cuda": FailedPrecondition
  // when fewer than tp GPUs are visible (launcher "mpi": no GPU in some process), with CUDA's
  // reason when none is, checked before any weight is read; Unimplemented in a build without
  // the CUDA backend.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelRunnerOptions& options);
  // A single-rank runner around an existing model (tests, tools that build their own backend).
  // `model` is not owned and must outlive the runner; the runner owns the KV cache it allocates.
  static std::unique_ptr<ModelRunner> ForModel(BloomModel* model);
  // This process's rank under options.launcher, before Create (a server opens its ports only on
  // rank 0): 0 for "threads"; for "mpi" the MPI_COMM_WORLD rank (initialising MPI).
  static absl::StatusOr<int> ProcessRank(const ModelRunnerOptions& options);

  virtual ~ModelRunner();

  virtual const BloomConfig& config() const = 0;
  virtual const ModelInfo& info() const = 0;  // rank 0's info; world_size filled
  virtual int world_size() const = 0;
  virtual size_t KvBytesPerBlock(int32_t block_size) const = 0;  // per rank
  // (Re)allocates the KV cache of every rank; any previous cache (and its contents) is dropped.
  // On failure (the CUDA backend: ResourceExhausted with the sizes when the pool does not fit)
  // no rank keeps a cache.
  virtual absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) = 0;
  // Bytes of KV cache each rank can hold, from its GPU's memory (the smallest over the ranks):
  //   gpu_memory_fraction * total - (total - free) - reserve
  // measured after the weights are loaded, so (total - free) counts the weights, the CUDA and
  // NCCL contexts and the backend's fixed workspaces. A KV cache allocated already is counted as
  // free (AllocateKvCache replaces it). `reserve` is what the forward allocates later: the step
  // workspace of BloomModel for 8192 tokens and 512 logit rows (it grows by doubling, so this
  // covers steps up to 4096 tokens and 256 logit rows) plus 512 MiB for the backend's per-step
  // scratch (attention partials, cuBLASLt) and allocator slack. If a step already ran, its
  // workspace is counted twice (used and reserved): conservative. Divide by KvBytesPerBlock for
  // the block count. ResourceExhausted when nothing is left; Unimplemented for backends without
  // device memory (CPU: callers fall back to a fixed budget).
  virtual absl::StatusOr<int64_t> KvCacheBytesFromMemory() const;
  // All ranks run the step; full logits ([logit_rows, vocab]) from rank 0.
  // FailedPrecondition before AllocateKvCache.
  virtual absl::Status Forward(const StepBatch& batch, float* logits) = 0;
  // The same step, but rank 0's full logits stay where its backend computed them: an fp32
  // [logit_rows, vocab] tensor in rank 0's backend memory (host memory for "cpu", so reading it
  // copies nothing; GPU memory for "cuda"), valid until the next Forward or ForwardKeepLogits on
  // this runner. Nothing goes to the host. The step's device work has completed on return.
  // Errors as Forward.
  virtual absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) = 0;
  // Copies `rows` (rows of ForwardKeepLogits' tensor, e.g. logits.Rows(first, end)) into host
  // memory `out` through rank 0's backend, on the thread that drives it.
  virtual absl::Status CopyLogitsToHost(const Tensor& rows, float* out) = 0;
  // A sampler for ForwardKeepLogits' logits: HostBatchSampler when rank 0's backend keeps them
  // in host memory ("cpu"), CudaBatchSampler on rank 0's CudaBackend ("cuda"; its calls are
  // made on the thread that drives that backend). It must be destroyed before the runner.
  // FailedPrecondition on an MPI follower; the device sampler's errors otherwise.
  virtual absl::StatusOr<std::unique_ptr<BatchSampler>> MakeBatchSampler() = 0;

  // Rank 0's step graph counters (ModelRunnerOptions::step_graphs): all zero when off.
  virtual StepGraphStats step_graph_stats() const { return StepGraphStats(); }
  // Prepares rank 0's model for serving steps of up to max_step_tokens tokens and
  // max_logit_rows logit rows, on placeholder steps of padding rows that write no K/V, so that
  // no request pays for it: the backend's per-shape GEMM plans (BloomModel::WarmUpLinearPlans),
  // then, with step graphs, every decode bucket's capture (BloomModel::WarmUpStepGraphs) for the
  // KV cache allocated last. The engine calls it once at start. FailedPrecondition before
  // AllocateKvCache. This default (tp > 1 runners, for now) does nothing.
  virtual absl::Status WarmUp(int32_t max_step_tokens, int32_t max_logit_rows) {
    (void)max_step_tokens;
    (void)max_logit_rows;
    return absl::OkStatus();
  }

  // Whether this process drives the runner (AllocateKvCache, KvCacheBytesFromMemory, Forward,
  // ForwardKeepLogits, CopyLogitsToHost, MakeBatchSampler).
  // Only launcher "mpi" has followers (ranks > 0), which call RunFollower instead and get
  // FailedPrecondition from those.
  // OK while steps can run. Otherwise the failure that left the runner unusable for good (a
  // tensor-parallel group out of step, a device in a sticky error state): every later step
  // would fail the same way, so the engine stops admitting requests. A step failure after which
  // Health() is OK (a timed-out collective whose communicators were rebuilt) is not fatal.
  virtual absl::Status Health() { return absl::OkStatus(); }
  virtual bool is_leader() const { return true; }
  // Followers: executes the leader's step plans until the leader's runner is destroyed (OK), or
  // the plan channel fails (an error; the job is broken). Leaders: FailedPrecondition.
  virtual absl::Status RunFollower();

  int64_t vocab_size() const { return config().vocab_size; }
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_MODEL_RUNNER_H_
