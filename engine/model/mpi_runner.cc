#include "engine/model/mpi_runner.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/loader/checkpoint.h"
#include "engine/loader/progress_bar.h"
#include "engine/model/rank_group.h"
#include "engine/model/rank_setup.h"
#include "engine/model/rank_thread.h"
#include "engine/model/runner_sampler.h"
#include "engine/model/step_plan.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_budget.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

// Set by engine/model/BUILD exactly where //kernels/cuda and //kernels/nccl are built (a toolkit
// at /usr/local/cuda and no --config=nocuda); these headers include no CUDA header.
#ifdef BLOSSOM_HAVE_CUDA
#include "engine/model/cuda_kernel_options.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#include "kernels/nccl/nccl_communicator.h"
#endif

namespace blossom {
namespace {

// One rank per process, started by mpirun (rank and world from MPI_COMM_WORLD). Rank 0, the
// leader, is driven like any runner (by the engine or a BatchGenerator): each AllocateKvCache,
// KvCacheBytesFromMemory (CUDA) and Forward / ForwardKeepLogits (the same plan) is first
// broadcast as a plan over `control_`, then run on the leader's own slice; the followers sit in
// RunFollower executing the same plans, so the model's collectives (over `data_`: MPI on the
// CPU, NCCL on CUDA) pair up. The leader's destructor broadcasts kShutdown, which ends
// RunFollower.
//
// Failures: start-up and KV allocation end with a status agreement (every rank returns the
// first rank's error). A step fails identically on every rank for a bad batch (validated before
// any collective), and the next step works. A rank that dies or stops answering inside a step
// makes the others' collective time out (DeadlineExceeded after the communicator's timeout; an
// MPI or NCCL error earlier): the data communicator is then aborted, the step returns that error,
// and every later step fails at once with FailedPrecondition (restart the job). Plain mpirun
// kills the whole job as soon as a process dies, so the timeout matters for a rank that hangs,
// or under `mpirun --enable-recovery`.
//
// Thread-safety: as ModelRunner. All work runs on `worker_`, the leader's sampler's calls and
// logits copies included; only the leader may call the leader's methods, only followers
// RunFollower.
class MpiRunner : public ModelRunner {
 public:
  static constexpr std::chrono::seconds kShutdownTimeout{30};

  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelRunnerOptions& options,
                                                             const MpiProcess& process) {
    std::unique_ptr<MpiRunner> runner(new MpiRunner(process, options.gpu_memory_fraction));
    BLOSSOM_RETURN_IF_ERROR(runner->worker_.Run([&] { return runner->Load(options); }));
    runner->loaded_ = true;
    return std::unique_ptr<ModelRunner>(std::move(runner));
  }

  ~MpiRunner() override {
    const absl::Status stopped = worker_.Run([this] {
      // Only a loaded runner has followers waiting in RunFollower.
      if (is_leader() && loaded_ && control_ != nullptr && !control_->aborted()) {
        std::string plan = EncodePlan(PlanKind::kShutdown);
        const absl::Status sent =
            control_->Broadcast(0, &plan, std::chrono::milliseconds(kShutdownTimeout));
        if (!sent.ok()) spdlog::warn("telling the followers to stop failed: {}", sent.ToString());
      }
      // The model and cache before the communicators and the backend they use.
      cache_.reset();
      model_.reset();
      mpi_data_.reset();
#ifdef BLOSSOM_HAVE_CUDA
      nccl_data_.reset();
      nccl_.reset();
#endif
      backend_.reset();
      control_.reset();
      return absl::OkStatus();
    });
    (void)stopped;  // teardown cannot fail
  }

  const BloomConfig& config() const override { return model_->config(); }
  const ModelInfo& info() const override { return info_; }
  int world_size() const override { return process_.world_size; }
  size_t KvBytesPerBlock(int32_t block_size) const override {
    return model_->KvBytesPerBlock(block_size);
  }
  bool is_leader() const override { return process_.rank == 0; }

  absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override {
    BLOSSOM_RETURN_IF_ERROR(LeaderOnly("AllocateKvCache"));
    has_cache_ = false;
    kv_bytes_ = 0;
    return worker_.Run([&]() -> absl::Status {
      std::string plan = EncodePlan(PlanKind::kAllocateKv, {num_blocks, block_size});
      BLOSSOM_RETURN_IF_ERROR(control_->Broadcast(0, &plan));
      BLOSSOM_RETURN_IF_ERROR(AllocateHere(num_blocks, block_size));
      has_cache_ = true;
      kv_bytes_ = static_cast<int64_t>(KvBytesPerBlock(block_size)) * num_blocks;
      return absl::OkStatus();
    });
  }

  absl::StatusOr<int64_t> KvCacheBytesFromMemory() const override {
    if (backend_->device() != DeviceKind::kCuda) {
      // Unimplemented, decided here alone: every rank has the same kind of backend.
      return KvBudgetOnRank(backend_.get(), *model_, world_size(), gpu_memory_fraction_,
                            kv_bytes_);
    }
    BLOSSOM_RETURN_IF_ERROR(LeaderOnly("KvCacheBytesFromMemory"));
    int64_t smallest = 0;
    BLOSSOM_RETURN_IF_ERROR(worker_.Run([&]() -> absl::Status {
      std::string plan = EncodePlan(PlanKind::kKvBudget);
      BLOSSOM_RETURN_IF_ERROR(control_->Broadcast(0, &plan));
      BLOSSOM_ASSIGN_OR_RETURN(smallest, KvBudgetHere(kv_bytes_));
      return absl::OkStatus();
    }));
    return smallest;
  }

  absl::Status Forward(const StepBatch& batch, float* logits) override {
    return LeaderStep("Forward", batch, [&] { return model_->Forward(batch, *cache_, logits); });
  }

  // The followers run the same kForward plan; the leader's model assembles the all-gathered
  // slices into full rows on its own backend.
  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) override {
    Tensor kept;
    BLOSSOM_RETURN_IF_ERROR(LeaderStep("ForwardKeepLogits", batch, [&]() -> absl::Status {
      BLOSSOM_ASSIGN_OR_RETURN(kept, model_->ForwardKeepLogits(batch, *cache_));
      return absl::OkStatus();
    }));
    return kept;
  }

  // The group out of step (broken_), or this rank's device. A dead follower shows as broken_.
  absl::Status Health() override {
    if (!broken_.ok()) return broken_;
    if (backend_ == nullptr) return absl::OkStatus();
    return worker_.Run([&] { return backend_->Health(); });
  }

  absl::Status CopyLogitsToHost(const Tensor& rows, float* out) override {
    BLOSSOM_RETURN_IF_ERROR(LeaderOnly("CopyLogitsToHost"));
    return worker_.Run([&] { return backend_->CopyToHost(rows, out); });
  }

  absl::StatusOr<std::unique_ptr<BatchSampler>> MakeBatchSampler() override {
    BLOSSOM_RETURN_IF_ERROR(LeaderOnly("MakeBatchSampler"));
    return MakeSamplerOnBackendThread(
        backend_.get(),
        [this](const std::function<absl::Status()>& fn) { return worker_.Run(fn); });
  }

  absl::Status RunFollower() override {
    if (is_leader()) {
      return absl::FailedPreconditionError(
          "RunFollower: this process is rank 0, the leader; it drives the runner instead");
    }
    if (follower_done_) return absl::FailedPreconditionError("RunFollower: already shut down");
    spdlog::info("model rank {}/{}: following rank 0's step plans", process_.rank, world_size());
    return worker_.Run([this]() -> absl::Status {
      while (true) {
        std::string bytes;
        // Idle between steps for as long as the leader has no work: no time limit.
        BLOSSOM_RETURN_IF_ERROR(control_->Broadcast(0, &bytes, std::chrono::milliseconds::max()));
        BLOSSOM_ASSIGN_OR_RETURN(std::vector<int32_t> words, PlanWords(bytes));
        switch (static_cast<PlanKind>(words[0])) {
          case PlanKind::kForward: {
            BLOSSOM_ASSIGN_OR_RETURN(StepBatch batch, DecodeForward(words));
            absl::Status s = cache_ == nullptr
                                 ? absl::FailedPreconditionError("forward before AllocateKvCache")
                                 : model_->Forward(batch, *cache_, nullptr);
            // The leader reports the step's error to its caller; here it is only logged.
            if (!s.ok()) {
              spdlog::warn("model rank {}/{}: step failed: {}", process_.rank, world_size(),
                            s.ToString());
            }
            break;
          }
          case PlanKind::kAllocateKv:
            if (words.size() != 3) return absl::InternalError("malformed KV allocation plan");
            // The leader reports the agreed status; this rank's pool counts as free memory in
            // a later budget (KvBudgetHere), as the leader's does.
            kv_bytes_ = AllocateHere(words[1], words[2]).ok()
                            ? static_cast<int64_t>(KvBytesPerBlock(words[2])) * words[1]
                            : 0;
            break;
          case PlanKind::kKvBudget:
            (void)KvBudgetHere(kv_bytes_);
            break;
          case PlanKind::kShutdown:
            follower_done_ = true;
            spdlog::info("model rank {}/{}: the leader shut down", process_.rank, world_size());
            return absl::OkStatus();
          default:
            return absl::InternalError(absl::StrCat("unknown step plan kind ", words[0]));
        }
      }
    });
  }

 private:
  MpiRunner(const MpiProcess& process, double gpu_memory_fraction)
      : process_(process), gpu_memory_fraction_(gpu_memory_fraction) {}

  // A step on the leader: the plan to the followers, then `run_model` (this rank's share of the
  // step) on the worker thread. A step that fails after its plan went out fails every later
  // step (the ranks may be out of step); one refused by ValidateBatch is never sent.
  absl::Status LeaderStep(const char* what, const StepBatch& batch,
                          const std::function<absl::Status()>& run_model) {
    BLOSSOM_RETURN_IF_ERROR(LeaderOnly(what));
    if (!has_cache_) {
      return absl::FailedPreconditionError(
          absl::StrCat("ModelRunner::", what, " before AllocateKvCache"));
    }
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the tensor-parallel processes are out of step since an earlier failure (",
          broken_.message(), "); restart the job"));
    }
    return worker_.Run([&]() -> absl::Status {
      // A step refused here is never sent: no rank runs it.
      absl::Status s = model_->ValidateBatch(batch, *cache_);
      if (s.ok()) {
        std::string plan = EncodeForward(batch);
        s = control_->Broadcast(0, &plan);
        if (s.ok()) {
          s = run_model();
          // Past the broadcast the followers run the step whatever happens here. A failure of
          // this rank alone (an allocation only the leader makes, for the assembled logits)
          // leaves them inside the step's collectives, which this rank's next step would pair
          // with: every later step would compute on the wrong rank's data, silently. So any
          // failure of a sent step puts the group out of step for good.
          if (!s.ok()) broken_ = s;
        } else if (GroupBroken()) {
          broken_ = s;
        }
      }
      if (!s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("tensor-parallel rank 0 of ", world_size(), ": ",
                                         s.message()));
      }
      return s;
    });
  }

  absl::Status LeaderOnly(const char* what) const {
    if (is_leader()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, " on tensor-parallel rank ", process_.rank,
                     ": followers execute the leader's step plans (call RunFollower)"));
  }

  // Whether a communicator gave up on an operation (timeout, MPI/NCCL error): the ranks may
  // then be at different points of the plan, so no later step can be trusted.
  bool GroupBroken() const {
    if (control_ != nullptr && control_->aborted()) return true;
    if (mpi_data_ != nullptr) return mpi_data_->aborted();
#ifdef BLOSSOM_HAVE_CUDA
    if (nccl_ != nullptr) return nccl_->aborted();
#endif
    return false;
  }

  // How long the ranks wait for the slowest one to load (the Kubernetes manifests' startup probe
  // allows 30 minutes).
  static constexpr std::chrono::milliseconds kLoadAgreementTimeout = std::chrono::minutes(30);

  // On the worker thread, on every rank at once. Collective set-up first (each step ends with a
  // status agreement, so no rank is left waiting for one that failed), then the local load.
  absl::Status Load(const ModelRunnerOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    const bool cuda = options.backend == "cuda";
    const int rank = process_.rank, world = process_.world_size;
    MpiOptions mpi_options;
    mpi_options.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(options.collective_timeout_seconds * 1000.0));
    BLOSSOM_ASSIGN_OR_RETURN(control_, MpiCommunicator::Create(mpi_options));
    absl::Status s = absl::OkStatus();
#ifdef BLOSSOM_HAVE_CUDA
    if (cuda) s = CheckVisibleGpus(1);
#endif
    BLOSSOM_RETURN_IF_ERROR(control_->AgreeOnStatus(s));
    if (cuda) {
#ifdef BLOSSOM_HAVE_CUDA
      // What kernels/nccl:nccl_mpi_bootstrap does, over the control communicator so that a
      // rank that fails or never arrives is an agreed error or a timeout, not a blocked
      // MPI_Bcast: rank 0's NCCL unique id reaches every rank, and each process drives the GPU
      // of its rank among the processes on its machine (modulo the visible GPUs).
      std::string id;
      if (rank == 0) {
        absl::StatusOr<std::string> made = NcclCommunicator::NewUniqueId();
        s = made.status();
        if (made.ok()) id = std::move(*made);
      }
      BLOSSOM_RETURN_IF_ERROR(control_->AgreeOnStatus(s));
      BLOSSOM_RETURN_IF_ERROR(control_->Broadcast(0, &id));
      NcclOptions nccl_options;
      nccl_options.timeout = mpi_options.timeout;
      const int device = process_.local_rank % std::max(1, cuda::QueryDevices().count);
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl =
          NcclCommunicator::Create(id, rank, world, device, nccl_options);
      s = nccl.status();
      if (nccl.ok()) nccl_ = std::move(*nccl);
#endif
    } else {
      absl::StatusOr<std::unique_ptr<MpiCommunicator>> data =
          MpiCommunicator::Create(mpi_options);
      s = data.status();
      if (data.ok()) mpi_data_ = std::move(*data);
    }
    BLOSSOM_RETURN_IF_ERROR(control_->AgreeOnStatus(s));
    s = LoadHere(options, cuda, rank, world);
    // Loading takes minutes and its length differs between machines (their storage, a 352 GB
    // checkpoint read on each): the ranks wait for each other here far longer than the
    // per-step --collective_timeout, which a slow node would otherwise turn into a failed start.
    BLOSSOM_RETURN_IF_ERROR(control_->AgreeOnStatus(
        s, std::max<std::chrono::milliseconds>(mpi_options.timeout, kLoadAgreementTimeout)));
    LogWeights(model_->info());
    info_ = model_->info();
    info_.load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return absl::OkStatus();
  }

  // This rank's config, checkpoint, backend and model slice.
  absl::Status LoadHere(const ModelRunnerOptions& options, bool cuda, int rank, int world) {
    BLOSSOM_ASSIGN_OR_RETURN(BloomConfig config, LoadBloomConfig(options.model_dir));
    const absl::Status split = CheckTensorParallelSplit(config, world);
    if (!split.ok()) {
      return absl::Status(split.code(), absl::StrCat(options.model_dir, ": ", split.message()));
    }
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> opened,
                             Checkpoint::Open(options.model_dir));
    std::shared_ptr<const Checkpoint> checkpoint(std::move(opened));
    if (options.prefetch) {
      if (rank == 0) {  // one progress bar for the job
        ProgressBar bar(checkpoint->total_bytes());
        absl::Status s = checkpoint->Prefetch(bar.Callback());
        bar.Finish();
        BLOSSOM_RETURN_IF_ERROR(s);
      } else {
        BLOSSOM_RETURN_IF_ERROR(checkpoint->Prefetch());
      }
    }
    Communicator* communicator = mpi_data_.get();
    if (cuda) {
#ifdef BLOSSOM_HAVE_CUDA
      const CudaBackend::Options backend_options =
          CudaBackendOptionsFor(options.cuda_kernels, nccl_->device());
      BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                               CudaBackend::Create(backend_options));
      spdlog::info("model rank {}/{}: GPU {}: {}", rank, world, nccl_->device(),
                   backend->device_name());
      backend_ = std::move(backend);
      nccl_data_ = std::make_unique<StreamOrderedCommunicator>(backend_.get(), rank, world);
      nccl_data_->Bind(nccl_.get());
      communicator = nccl_data_.get();
#endif
    } else {
      // The cores of this machine, shared by the ranks on it.
      int threads = options.threads_per_rank;
      if (threads <= 0) {
        threads = std::max(1, UsableCpus() / std::max(1, process_.local_size));
      }
      // Spin between ops only when this machine's ranks have a core per thread (thread_pool.h).
      const bool spin_wait =
          static_cast<int64_t>(threads) * std::max(1, process_.local_size) <= UsableCpus();
      backend_ = std::make_unique<CpuBackend>(threads, spin_wait);
    }
    ModelLoadOptions load;
    load.prefetch = false;  // done above
    load.strict_load = options.strict_load;
    load.quantize = options.quantize;
    load.quantize_lm_head = options.quantize_lm_head;
    load.kv_cache_dtype = options.kv_cache_dtype;
    load.lora_adapter = options.lora_adapter;
    BLOSSOM_ASSIGN_OR_RETURN(model_, BloomModel::Load(checkpoint, backend_.get(), communicator,
                                                      load));
    return absl::OkStatus();
  }

  // Every rank: replaces its KV cache; the first rank's error on every rank.
  absl::Status AllocateHere(int32_t num_blocks, int32_t block_size) {
    cache_.reset();  // free the old pool before allocating the new one
    const size_t per_block = model_->KvBytesPerBlock(block_size);
    absl::StatusOr<std::unique_ptr<KvCache>> cache = model_->CreateKvCache(num_blocks, block_size);
    absl::Status s = cache.status();
    if (cache.ok()) cache_ = std::move(*cache);
    s = control_->AgreeOnStatus(s);
    if (!s.ok()) {
      cache_.reset();  // so a retry with fewer blocks has all the memory back
      return KvAllocationError(s, num_blocks, block_size, per_block);
    }
    LogKv(process_.rank, world_size(), num_blocks, block_size, per_block);
    return absl::OkStatus();
  }

  // Every rank: the smallest KV budget over the ranks (CUDA).
  absl::StatusOr<int64_t> KvBudgetHere(int64_t kv_bytes_now) const {
    absl::StatusOr<int64_t> mine = KvBudgetOnRank(backend_.get(), *model_, world_size(),
                                                  gpu_memory_fraction_, kv_bytes_now);
    BLOSSOM_RETURN_IF_ERROR(control_->AgreeOnStatus(mine.status()));
    int64_t value = *mine;
    std::vector<int64_t> all(static_cast<size_t>(world_size()));
    const int64_t world = world_size();
    BLOSSOM_RETURN_IF_ERROR(control_->AllGather(Tensor(&value, DType::kI64, {1}),
                                                Tensor(all.data(), DType::kI64, {world})));
    return *std::min_element(all.begin(), all.end());
  }

  const MpiProcess process_;
  const double gpu_memory_fraction_;
  ModelInfo info_;
  // Touched only on worker_'s thread once created there (mutable: const methods dispatch too).
  mutable RankThread worker_;
  std::unique_ptr<MpiCommunicator> control_;   // plans and status agreements
  std::unique_ptr<MpiCommunicator> mpi_data_;  // the model's collectives (CPU)
#ifdef BLOSSOM_HAVE_CUDA
  std::unique_ptr<NcclCommunicator> nccl_;                 // the model's collectives (CUDA)
  std::unique_ptr<StreamOrderedCommunicator> nccl_data_;  // nccl_ after the backend's stream
#endif
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<BloomModel> model_;
  std::unique_ptr<KvCache> cache_;
  bool has_cache_ = false;        // leader's caller thread
  int64_t kv_bytes_ = 0;          // this rank's KV cache bytes (0 before an allocation)
  absl::Status broken_;           // leader: the failure that aborted the data communicator
  bool follower_done_ = false;    // follower: kShutdown received
  bool loaded_ = false;           // Create succeeded on every rank
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRunner>> CreateMpiRunner(const ModelRunnerOptions& options,
                                                             const MpiProcess& process) {
  return MpiRunner::Create(options, process);
}

}  // namespace blossom
