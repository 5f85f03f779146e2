#include "engine/model/model_runner.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/loader/checkpoint.h"
#include "engine/loader/lora_adapter.h"
#include "engine/loader/progress_bar.h"
#include "engine/model/mpi_runner.h"
#include "engine/model/multi_rank_runner.h"
#include "engine/model/rank_group.h"
#include "engine/model/rank_setup.h"
#include "engine/model/single_rank_runner.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_budget.h"
#include "kernels/mpi/mpi_communicator.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

// Set by engine/model/BUILD exactly where //kernels/cuda and //kernels/nccl are built (a toolkit
// at /usr/local/cuda and no --config=nocuda); these headers include no CUDA header.
#ifdef BLOSSOM_HAVE_CUDA
#include "engine/model/cuda_kernel_options.h"
#include "kernels/cuda/cuda_backend.h"
#endif

namespace blossom {

ModelRunner::~ModelRunner() = default;

absl::StatusOr<int64_t> ModelRunner::KvCacheBytesFromMemory() const {
  return absl::UnimplementedError(
      "KvCacheBytesFromMemory: this runner cannot size the KV cache from device memory; use a "
      "fixed KV budget");
}

absl::Status ModelRunner::RunFollower() {
  return absl::FailedPreconditionError(
      "RunFollower: this runner is the leader (only launcher \"mpi\" has followers, ranks > 0)");
}

absl::StatusOr<int> ModelRunner::ProcessRank(const ModelRunnerOptions& options) {
  if (options.launcher != "mpi") return 0;
  BLOSSOM_ASSIGN_OR_RETURN(const MpiProcess process, InitMpi());
  return process.rank;
}

std::unique_ptr<ModelRunner> ModelRunner::ForModel(BloomModel* model) {
  return MakeSingleRankRunner(nullptr, nullptr, model, 0.0,
                              ModelRunnerOptions().gpu_memory_fraction);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const ModelRunnerOptions& options) {
  const bool cuda = options.backend == "cuda";
  if (cuda) {
#ifndef BLOSSOM_HAVE_CUDA
    return absl::UnimplementedError(
        "this build has no CUDA backend (built with --config=nocuda or without /usr/local/cuda)");
#endif
  } else if (options.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", options.backend, "' (expected: cpu, cuda)"));
  }
  const int tp = options.tensor_parallel_size;
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel size must be at least 1, got ", tp));
  }
  if (options.launcher != "threads" && options.launcher != "mpi") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown launcher '", options.launcher, "' (expected: threads, mpi)"));
  }
#ifdef BLOSSOM_HAVE_CUDA
  if (cuda) {
    const double fraction = options.gpu_memory_fraction;
    if (!(fraction > 0.0 && fraction <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpu_memory_fraction must be in (0, 1], got ", fraction));
    }
    // Before reading anything: on a machine without (enough) GPUs this is the one error to give.
    // (launcher "mpi": one GPU per process, checked on every rank by MpiRunner.)
    if (options.launcher != "mpi") BLOSSOM_RETURN_IF_ERROR(CheckVisibleGpus(tp));
  }
#endif
  if (options.step_graphs && (tp > 1 || options.launcher == "mpi")) {
    spdlog::warn("step graphs: not used with tensor parallelism or the mpi launcher yet "
                 "(collectives are not captured): every step runs uncaptured");
  }
  if (options.launcher == "mpi") {
    if (!(options.collective_timeout_seconds > 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat("collective_timeout_seconds must be > 0, got ",
                                                     options.collective_timeout_seconds));
    }
    BLOSSOM_ASSIGN_OR_RETURN(const MpiProcess process, InitMpi());
    // Every rank sees the same world size, so every rank refuses alike (no rank left waiting).
    if (process.world_size != tp) {
      return absl::InvalidArgumentError(absl::StrCat(
          "launcher mpi: tensor-parallel size ", tp, " must equal the MPI world size ",
          process.world_size, " (start one process per rank: mpirun -np ", tp, ")"));
    }
    return CreateMpiRunner(options, process);
  }
  const auto start = std::chrono::steady_clock::now();
  // Check the head split before mapping any weights: the clearest error, and the cheapest.
  BLOSSOM_ASSIGN_OR_RETURN(BloomConfig config, LoadBloomConfig(options.model_dir));
  const absl::Status split = CheckTensorParallelSplit(config, tp);
  if (!split.ok()) {
    return absl::Status(split.code(), absl::StrCat(options.model_dir, ": ", split.message()));
  }
  int threads = options.threads_per_rank;
  if (threads <= 0) {
    threads = std::max(1, UsableCpus() / tp);
  }

  // One mapping for all ranks: each rank's weights are views of its own slices of it.
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> opened, Checkpoint::Open(options.model_dir));
  std::shared_ptr<const Checkpoint> checkpoint(std::move(opened));
  if (options.prefetch) {
    ProgressBar bar(checkpoint->total_bytes());
    absl::Status s = checkpoint->Prefetch(bar.Callback());
    bar.Finish();
    BLOSSOM_RETURN_IF_ERROR(s);
  }
  // Config, mapping and prefetch: part of the load time the models do not see.
  const double open_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The ranks' pools spin between ops when every thread has a core of its own.
  const bool spin_wait = static_cast<int64_t>(threads) * tp <= UsableCpus();
  BackendFactory make_backend = [threads,
                                 spin_wait](int) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(threads, spin_wait));
  };
  GroupFactory make_group =
      [tp](const std::vector<Backend*>&) -> absl::StatusOr<std::unique_ptr<RankGroup>> {
    return std::unique_ptr<RankGroup>(std::make_unique<ThreadRankGroup>(tp));
  };
#ifdef BLOSSOM_HAVE_CUDA
  if (cuda) {
    // Rank r on GPU r; created on the thread that will drive it (see MultiRankRunner).
    const CudaKernelOptions kernels = options.cuda_kernels;
    // Timing waits for the stream mid-step: never with NCCL collectives on it (tp > 1).
    const bool time_gemm = options.time_gemm_candidates && tp == 1;
    make_backend = [tp, kernels, time_gemm](int rank) -> absl::StatusOr<std::unique_ptr<Backend>> {
      CudaBackend::Options backend_options = CudaBackendOptionsFor(kernels, rank);
      backend_options.time_gemm_candidates = time_gemm;
      BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                               CudaBackend::Create(backend_options));
      spdlog::info("model rank {}/{}: GPU {}: {}", rank, tp, rank, backend->device_name());
      return std::unique_ptr<Backend>(std::move(backend));
    };
    const bool async_collectives = options.nccl_async_collectives;
    make_group = [async_collectives](const std::vector<Backend*>& backends) {
      return NcclRankGroup::Create(backends, async_collectives);
    };
  }
#endif

  ModelLoadOptions load;
  load.prefetch = false;  // the mapping was prefetched once above
  load.strict_load = options.strict_load;
  load.quantize = options.quantize;
  load.quantize_lm_head = options.quantize_lm_head;
  load.kv_cache_dtype = options.kv_cache_dtype;
  if (!options.lora_adapter.empty()) {
    // Read and checked once; every rank merges its own slices from it.
    BLOSSOM_ASSIGN_OR_RETURN(load.lora, LoraAdapter::Load(options.lora_adapter, config));
  }
  if (tp == 1) {
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(0));
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<BloomModel> model,
                             BloomModel::Load(checkpoint, backend.get(), nullptr, load));
    LogWeights(model->info());
    if (options.step_graphs) {
      BLOSSOM_RETURN_IF_ERROR(model->EnableStepGraphs(options.step_graph_options));
      spdlog::info("step graphs: decode batches up to {} sequences, contexts up to {} tokens",
                   options.step_graph_options.max_batch, options.step_graph_options.max_context);
    }
    BloomModel* raw = model.get();
    return MakeSingleRankRunner(std::move(backend), std::move(model), raw, open_seconds,
                                options.gpu_memory_fraction);
  }
  return CreateMultiRankRunner(tp, options.gpu_memory_fraction, checkpoint, open_seconds,
                               make_backend, make_group, load);
}

}  // namespace blossom
