#include "engine/model/model_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/loader/checkpoint.h"
#include "engine/loader/progress_bar.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_communicator.h"
#include "kernels/mpi/mpi_communicator.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

// Set by engine/model/BUILD exactly where //kernels/cuda and //kernels/nccl are built (a toolkit
// at /usr/local/cuda and no --config=nocuda); these headers include no CUDA header.
#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#include "kernels/nccl/nccl_communicator.h"
#endif

namespace blossom {
namespace {

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void LogWeights(const ModelInfo& info) {
  spdlog::info("model rank {}/{}: weights {:.2f} MiB ({}, quantize {}, backend {})", info.rank,
               info.world_size, MiB(info.weight_bytes_this_rank), DTypeName(info.weight_dtype),
               absl::StrCat(WeightQuantName(info.quantize), info.quantize_lm_head ? " + lm head" : ""),
               info.backend);
}

void LogKv(int rank, int world, int32_t num_blocks, int32_t block_size, size_t per_block) {
  spdlog::info("model rank {}/{}: KV cache {} blocks x {} tokens = {:.2f} MiB", rank, world,
               num_blocks, block_size, MiB(static_cast<uint64_t>(per_block) * num_blocks));
}

// The backend's error with the pool's geometry, so "out of memory" says what was asked for.
absl::Status KvAllocationError(const absl::Status& error, int32_t num_blocks, int32_t block_size,
                               size_t per_block) {
  return absl::Status(
      error.code(),
      absl::StrCat("KV cache of ", num_blocks, " blocks x ", block_size, " tokens (",
                   static_cast<uint64_t>(per_block) * std::max(num_blocks, 0),
                   " bytes per rank) cannot be allocated: ", error.message()));
}

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
  // gathered, gathered_ln; fp32 local and all-gathered logits (the largest vocabulary slice);
  // the row index.
  const int64_t vocab_local_max = SliceForRank(c.vocab_size, 0, world).size();
  const int64_t per_row = act * 2 * h + 4 * vocab_local_max * (1 + world) + i32;
  return kReserveTokens * per_token + kReserveLogitRows * per_row + kReserveSlackBytes;
}
#endif  // BLOSSOM_HAVE_CUDA

// KvCacheBytesFromMemory for one rank; call it on the rank's thread (the memory queries set the
// calling thread's current CUDA device to the backend's). `kv_bytes_now`: the rank's current KV
// cache, which AllocateKvCache would free first.
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

// One rank, run on the caller's thread. With a CudaBackend (tp 1) that is GPU 0, every thread's
// default device, so the engine thread may differ from the one that called Create.
class SingleRankRunner : public ModelRunner {
 public:
  SingleRankRunner(std::unique_ptr<Backend> backend, std::unique_ptr<BloomModel> owned_model,
                   BloomModel* model, double extra_load_seconds, double gpu_memory_fraction)
      : backend_(std::move(backend)),
        owned_model_(std::move(owned_model)),
        model_(model),
        info_(model->info()),
        gpu_memory_fraction_(gpu_memory_fraction) {
    info_.load_seconds += extra_load_seconds;
  }

  const BloomConfig& config() const override { return model_->config(); }
  const ModelInfo& info() const override { return info_; }
  int world_size() const override { return 1; }
  size_t KvBytesPerBlock(int32_t block_size) const override {
    return model_->KvBytesPerBlock(block_size);
  }
  absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override {
    cache_.reset();  // free the old pool before allocating the new one
    kv_bytes_ = 0;
    const size_t per_block = model_->KvBytesPerBlock(block_size);
    absl::StatusOr<std::unique_ptr<KvCache>> cache = model_->CreateKvCache(num_blocks, block_size);
    if (!cache.ok()) return KvAllocationError(cache.status(), num_blocks, block_size, per_block);
    cache_ = std::move(*cache);
    kv_bytes_ = static_cast<int64_t>(per_block) * num_blocks;
    LogKv(0, 1, num_blocks, block_size, per_block);
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> KvCacheBytesFromMemory() const override {
    if (backend_ == nullptr) {
      return absl::UnimplementedError(
          "KvCacheBytesFromMemory: this runner wraps a caller's model (ForModel) and does not "
          "know its backend; use a fixed KV budget");
    }
    return KvBudgetOnRank(backend_.get(), *model_, 1, gpu_memory_fraction_, kv_bytes_);
  }
  absl::Status Forward(const StepBatch& batch, float* logits) override {
    if (cache_ == nullptr) {
      return absl::FailedPreconditionError("ModelRunner::Forward before AllocateKvCache");
    }
    return model_->Forward(batch, *cache_, logits);
  }

 private:
  // Destruction order (reverse): cache, model, backend.
  std::unique_ptr<Backend> backend_;  // null when wrapping a caller's model
  std::unique_ptr<BloomModel> owned_model_;
  BloomModel* model_;
  ModelInfo info_;  // the model's, load time including the open and prefetch done by Create
  const double gpu_memory_fraction_;
  std::unique_ptr<KvCache> cache_;
  int64_t kv_bytes_ = 0;  // cache_'s size
};

// How the ranks of a MultiRankRunner reach each other: the communicators their models use, and
// how a group that a failed step aborted is made usable again.
// Thread-safety: communicator(r) is used by rank r's thread; Abort may be called from any
// thread; Rearm only while every rank is idle; ReleaseRank(r) on rank r's thread.
class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual Communicator* communicator(int rank) = 0;
  // Wakes every rank waiting in a collective with an error; called by a rank that failed.
  virtual void Abort(const absl::Status& reason) = 0;
  // After an aborted step, once every rank has released its part: makes collectives usable
  // again.
  virtual absl::Status Rearm() = 0;
  // Frees what belongs to rank r, on its thread (where its GPU is the current device): at
  // teardown, after rank r's model is gone, and after an abort, before Rearm.
  virtual void ReleaseRank(int rank) { (void)rank; }
};

// CPU: one in-process ThreadCommunicatorGroup.
class ThreadRankGroup : public RankGroup {
 public:
  explicit ThreadRankGroup(int world) : group_(world) {}
  Communicator* communicator(int rank) override { return group_.communicator(rank); }
  void Abort(const absl::Status& reason) override { group_.Abort(reason); }
  absl::Status Rearm() override {
    group_.Reset();
    return absl::OkStatus();
  }

 private:
  ThreadCommunicatorGroup group_;
};

#ifdef BLOSSOM_HAVE_CUDA

// Rank r's communicator for BloomModel: its NcclCommunicator, after draining the rank's compute
// stream. CreateAll gives each communicator its own stream, and BloomModel calls a collective
// right after enqueueing the kernels that produce its input, so without the drain NCCL could read
// a buffer the backend is still writing. NcclCommunicator returns only once its stream has passed
// the collective, so the kernels enqueued afterwards see the result. (One host sync per
// collective; ordering the two streams with events instead would avoid it.)
// Thread-safety: used by rank r's thread; Bind only while that thread is idle.
class StreamOrderedCommunicator : public Communicator {
 public:
  StreamOrderedCommunicator(Backend* backend, int rank, int world)
      : backend_(backend), rank_(rank), world_(world) {}
  void Bind(NcclCommunicator* nccl) { nccl_ = nccl; }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  absl::Status AllReduceSum(Tensor inout) override {
    BLOSSOM_RETURN_IF_ERROR(Ready());
    BLOSSOM_RETURN_IF_ERROR(backend_->Synchronize());
    return nccl_->AllReduceSum(inout);
  }
  absl::Status AllGather(const Tensor& in, Tensor out) override {
    BLOSSOM_RETURN_IF_ERROR(Ready());
    BLOSSOM_RETURN_IF_ERROR(backend_->Synchronize());
    return nccl_->AllGather(in, out);
  }

 private:
  absl::Status Ready() const {
    if (nccl_ != nullptr) return absl::OkStatus();
    // RankLoop prefixes the rank.
    return absl::FailedPreconditionError(
        "no NCCL communicator: rebuilding them after an earlier failure did not succeed (the "
        "next failed step tries again)");
  }

  Backend* const backend_;
  const int rank_, world_;
  NcclCommunicator* nccl_ = nullptr;  // null between ReleaseRank and a successful Rearm
};

// CUDA: NCCL communicators over GPUs 0..world-1, created together by CreateAll. An aborted NCCL
// communicator cannot be reused, so Rearm builds a new set and rebinds every rank to it.
// Invariant: wrappers_[r] forwards to comms_[r], or to nothing (failing every collective) when
// that was released and not rebuilt.
class NcclRankGroup : public RankGroup {
 public:
  // `backends[r]`: rank r's backend (on GPU r), for the stream drain; must outlive the group.
  static absl::StatusOr<std::unique_ptr<RankGroup>> Create(const std::vector<Backend*>& backends) {
    std::unique_ptr<NcclRankGroup> group(new NcclRankGroup());
    const int world = static_cast<int>(backends.size());
    for (int r = 0; r < world; ++r) {
      group->wrappers_.push_back(
          std::make_unique<StreamOrderedCommunicator>(backends[r], r, world));
    }
    BLOSSOM_RETURN_IF_ERROR(group->Build());
    return std::unique_ptr<RankGroup>(std::move(group));
  }

  Communicator* communicator(int rank) override { return wrappers_[rank].get(); }

  void Abort(const absl::Status&) override {
    // comms_ does not change during a step (ReleaseRank and Rearm run only between steps).
    // NcclCommunicator::Abort is safe from any thread; an idle communicator is freed at once.
    for (const auto& comm : comms_)
      if (comm != nullptr) comm->Abort();
  }

  absl::Status Rearm() override {
    // The old set was aborted and released (ReleaseRank) by the ranks already.
    absl::Status built = Build();
    if (!built.ok()) {
      return absl::Status(built.code(), absl::StrCat("cannot rebuild the NCCL communicators "
                                                     "after a failed step: ",
                                                     built.message()));
    }
    return absl::OkStatus();
  }

  void ReleaseRank(int rank) override {
    // On the rank's thread, all ranks at once: finalizing a healthy communicator (teardown) may
    // wait for its peers to finalize theirs; an aborted one only destroys its stream, on the
    // GPU that is current there.
    wrappers_[rank]->Bind(nullptr);
    if (rank < static_cast<int>(comms_.size())) comms_[rank].reset();
  }

 private:
  NcclRankGroup() = default;

  absl::Status Build() {
    std::vector<int> devices(wrappers_.size());
    for (size_t r = 0; r < devices.size(); ++r) devices[r] = static_cast<int>(r);
    // On a thread of its own: CreateAll leaves the calling thread's current CUDA device at the
    // last GPU, which must not leak into the engine thread or a rank thread.
    absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> comms =
        absl::InternalError("NCCL CreateAll did not run");
    std::thread([&] { comms = NcclCommunicator::CreateAll(devices); }).join();
    if (!comms.ok()) return comms.status();
    comms_ = std::move(*comms);
    for (size_t r = 0; r < wrappers_.size(); ++r) wrappers_[r]->Bind(comms_[r].get());
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<StreamOrderedCommunicator>> wrappers_;
  std::vector<std::unique_ptr<NcclCommunicator>> comms_;
};

// FailedPrecondition unless `tp` GPUs are visible, with CUDA's reason when none is.
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

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(int rank)>;
using GroupFactory =
    std::function<absl::StatusOr<std::unique_ptr<RankGroup>>(const std::vector<Backend*>&)>;

// tp > 1 in one process: a thread per rank, each owning its backend, model slice and KV cache,
// all created, used and destroyed on that thread (a CUDA rank's thread has its GPU as current
// device, set when its CudaBackend is created there).
// Invariant: between calls to RunOnAllRanks every rank thread is idle, waiting for a task; so
// the group can be re-armed after a failure and the caller's thread never races a rank.
class MultiRankRunner : public ModelRunner {
 public:
  MultiRankRunner(int world, double gpu_memory_fraction)
      : ranks_(static_cast<size_t>(world)), gpu_memory_fraction_(gpu_memory_fraction) {
    for (int r = 0; r < world; ++r) ranks_[r].thread = std::thread([this, r] { RankLoop(r); });
  }

  ~MultiRankRunner() override {
    // Each rank's cache and model go before its communicator and its backend, on its thread.
    const absl::Status released = RunOnAllRanks(/*collective=*/false, [this](int r) {
      Rank& rank = ranks_[r];
      rank.cache.reset();
      rank.model.reset();
      if (group_ != nullptr) group_->ReleaseRank(r);
      rank.backend.reset();
      return absl::OkStatus();
    });
    (void)released;  // the teardown task cannot fail
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    task_cv_.notify_all();
    for (Rank& rank : ranks_)
      if (rank.thread.joinable()) rank.thread.join();
  }

  // Creates every rank's backend (on its thread), then the group, then loads the model slices.
  absl::Status Load(std::shared_ptr<const Checkpoint> checkpoint, double open_seconds,
                    const BackendFactory& make_backend, const GroupFactory& make_group,
                    bool strict_load, WeightQuant quantize, bool quantize_lm_head) {
    BLOSSOM_RETURN_IF_ERROR(RunOnAllRanks(/*collective=*/false, [&](int r) -> absl::Status {
      BLOSSOM_ASSIGN_OR_RETURN(ranks_[r].backend, make_backend(r));
      return absl::OkStatus();
    }));
    std::vector<Backend*> backends;
    for (const Rank& rank : ranks_) backends.push_back(rank.backend.get());
    BLOSSOM_ASSIGN_OR_RETURN(group_, make_group(backends));
    // Loading runs no collective (BloomModel::Load only reads the rank and world size).
    BLOSSOM_RETURN_IF_ERROR(RunOnAllRanks(/*collective=*/false, [&](int r) -> absl::Status {
      Rank& rank = ranks_[r];
      ModelLoadOptions options;
      options.prefetch = false;  // the shared mapping was prefetched once by Create
      options.strict_load = strict_load;
      options.quantize = quantize;
      options.quantize_lm_head = quantize_lm_head;
      BLOSSOM_ASSIGN_OR_RETURN(rank.model, BloomModel::Load(checkpoint, rank.backend.get(),
                                                            group_->communicator(r), options));
      return absl::OkStatus();
    }));
    for (const Rank& rank : ranks_) LogWeights(rank.model->info());
    info_ = ranks_[0].model->info();
    info_.load_seconds += open_seconds;
    return absl::OkStatus();
  }

  const BloomConfig& config() const override { return ranks_[0].model->config(); }
  const ModelInfo& info() const override { return info_; }
  int world_size() const override { return static_cast<int>(ranks_.size()); }
  size_t KvBytesPerBlock(int32_t block_size) const override {
    return ranks_[0].model->KvBytesPerBlock(block_size);  // every rank holds as many heads
  }

  absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override {
    has_cache_ = false;
    kv_bytes_ = 0;
    const size_t per_block = KvBytesPerBlock(block_size);
    absl::Status s = RunOnAllRanks(/*collective=*/false, [&](int r) -> absl::Status {
      Rank& rank = ranks_[r];
      rank.cache.reset();
      BLOSSOM_ASSIGN_OR_RETURN(rank.cache, rank.model->CreateKvCache(num_blocks, block_size));
      return absl::OkStatus();
    });
    if (!s.ok()) {
      // Free the ranks that succeeded, so a retry with fewer blocks has all the memory back.
      const absl::Status freed = RunOnAllRanks(/*collective=*/false, [&](int r) {
        ranks_[r].cache.reset();
        return absl::OkStatus();
      });
      (void)freed;  // resetting cannot fail
      return KvAllocationError(s, num_blocks, block_size, per_block);
    }
    for (int r = 0; r < world_size(); ++r)
      LogKv(r, world_size(), num_blocks, block_size, ranks_[r].model->KvBytesPerBlock(block_size));
    has_cache_ = true;
    kv_bytes_ = static_cast<int64_t>(per_block) * num_blocks;
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> KvCacheBytesFromMemory() const override {
    if (ranks_[0].backend->device() != DeviceKind::kCuda) {
      return KvBudgetOnRank(ranks_[0].backend.get(), *ranks_[0].model, world_size(),
                            gpu_memory_fraction_, kv_bytes_);  // Unimplemented, no rank needed
    }
    // Measured on each rank's thread: the memory queries use (and set) the current device.
    std::vector<int64_t> budgets(ranks_.size(), 0);
    BLOSSOM_RETURN_IF_ERROR(RunOnAllRanks(/*collective=*/false, [&](int r) -> absl::Status {
      BLOSSOM_ASSIGN_OR_RETURN(budgets[r],
                               KvBudgetOnRank(ranks_[r].backend.get(), *ranks_[r].model,
                                              world_size(), gpu_memory_fraction_, kv_bytes_));
      return absl::OkStatus();
    }));
    return *std::min_element(budgets.begin(), budgets.end());
  }

  absl::Status Forward(const StepBatch& batch, float* logits) override {
    if (!has_cache_) {
      return absl::FailedPreconditionError("ModelRunner::Forward before AllocateKvCache");
    }
    return RunOnAllRanks(/*collective=*/true, [&](int r) {
      // Every rank assembles the gathered logits collectively; only rank 0 copies them out.
      return ranks_[r].model->Forward(batch, *ranks_[r].cache, r == 0 ? logits : nullptr);
    });
  }

 private:
  struct Rank {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<BloomModel> model;
    std::unique_ptr<KvCache> cache;
    std::thread thread;
  };

  // Runs fn(rank) on every rank thread and waits for all of them. On failure returns the first
  // error. A `collective` task (one that may wait on the other ranks) that fails aborts the
  // group, so the others' Aborted errors come later and the first error is the cause; once every
  // rank has returned, each releases its part of the aborted group on its own thread and the
  // group is re-armed. Logically const: it only hands work to the rank threads
  // (KvCacheBytesFromMemory measures there).
  absl::Status RunOnAllRanks(bool collective, std::function<absl::Status(int)> fn) const {
    const absl::Status status = Dispatch(collective, std::move(fn));
    if (status.ok() || !collective || group_ == nullptr) return status;
    // Every rank is idle: make sure the whole group is aborted (a rank's collective may have
    // completed just as another failed), so releasing it runs no collective teardown.
    group_->Abort(status);
    const absl::Status released = Dispatch(/*collective=*/false, [this](int r) {
      group_->ReleaseRank(r);
      return absl::OkStatus();
    });
    absl::Status rearmed = released.ok() ? group_->Rearm() : released;
    if (!rearmed.ok()) {
      return absl::Status(status.code(), absl::StrCat(status.message(), "; ", rearmed.message()));
    }
    return status;
  }

  // One hand-off: fn(rank) on every rank thread; the first error, or OK.
  absl::Status Dispatch(bool collective, std::function<absl::Status(int)> fn) const {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = std::move(fn);
    task_collective_ = collective;
    pending_ = world_size();
    first_error_ = absl::OkStatus();
    ++task_generation_;
    task_cv_.notify_all();
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
    return first_error_;
  }

  void RankLoop(int r) const {
    uint64_t seen = 0;
    while (true) {
      std::function<absl::Status(int)> task;
      bool collective = false;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        task_cv_.wait(lock, [&] { return stopping_ || task_generation_ != seen; });
        if (stopping_) return;
        seen = task_generation_;
        task = task_;
        collective = task_collective_;
      }
      absl::Status s = task(r);
      if (!s.ok()) {
        s = absl::Status(s.code(), absl::StrCat("tensor-parallel rank ", r, " of ", world_size(),
                                                ": ", s.message()));
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (first_error_.ok()) first_error_ = s;
        }
        if (collective) group_->Abort(s);  // wake ranks waiting for this one in a collective
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  std::vector<Rank> ranks_;
  // Set by Load after the backends, before any collective task; destroyed after the threads.
  std::unique_ptr<RankGroup> group_;
  const double gpu_memory_fraction_;
  ModelInfo info_;  // rank 0's, load time including the shared open and prefetch
  bool has_cache_ = false;  // caller's thread only
  int64_t kv_bytes_ = 0;    // per rank; caller's thread only

  // Hand-off to the rank threads; mutable because const methods dispatch too.
  mutable std::mutex mutex_;
  mutable std::condition_variable task_cv_, done_cv_;
  mutable std::function<absl::Status(int)> task_;  // guarded by mutex_
  mutable bool task_collective_ = false;           // guarded by mutex_
  mutable uint64_t task_generation_ = 0;           // guarded by mutex_
  mutable int pending_ = 0;                        // guarded by mutex_
  mutable absl::Status first_error_;               // guarded by mutex_
  bool stopping_ = false;                          // guarded by mutex_
};


// ---- launcher "mpi": one process per rank ----

// Runs tasks on one thread it owns, so every backend, CUDA and MPI call of this process's rank
// is made on the same thread whoever calls the runner (a CUDA rank's current device is set on
// that thread once, when its backend is created there; MPI runs MPI_THREAD_SERIALIZED).
// Thread-safety: Run is called by one thread at a time.
class RankThread {
 public:
  RankThread() : thread_([this] { Loop(); }) {}
  ~RankThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  absl::Status Run(const std::function<absl::Status()>& fn) {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &fn;
    done_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_; });
    return result_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || task_ != nullptr; });
      if (task_ == nullptr) return;  // stopping, nothing queued
      const std::function<absl::Status()>* task = task_;
      lock.unlock();
      absl::Status result = (*task)();
      lock.lock();
      result_ = std::move(result);
      task_ = nullptr;
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  const std::function<absl::Status()>* task_ = nullptr;  // guarded by mutex_
  bool done_ = false;                                     // guarded by mutex_
  bool stopping_ = false;                                 // guarded by mutex_
  absl::Status result_;                                   // guarded by mutex_
  std::thread thread_;  // last: starts after the fields above exist
};

// What the leader asks the followers to do, broadcast over the control communicator before it
// does the same itself. Encoded as int32 words: kind, then the kind's arguments.
enum class PlanKind : int32_t { kForward = 1, kAllocateKv = 2, kKvBudget = 3, kShutdown = 4 };

void AppendWords(std::string* out, const int32_t* words, size_t n) {
  out->append(reinterpret_cast<const char*>(words), n * sizeof(int32_t));
}

std::string EncodePlan(PlanKind kind, std::initializer_list<int32_t> args = {}) {
  std::string out;
  const int32_t k = static_cast<int32_t>(kind);
  AppendWords(&out, &k, 1);
  for (int32_t a : args) AppendWords(&out, &a, 1);
  return out;
}

// kForward: max_blocks_per_seq, the five vectors' sizes, then their contents.
std::string EncodeForward(const StepBatch& batch) {
  const std::vector<int32_t>* parts[] = {&batch.token_ids, &batch.query_start, &batch.context_len,
                                         &batch.block_tables, &batch.logit_rows};
  std::string out = EncodePlan(PlanKind::kForward, {batch.max_blocks_per_seq});
  for (const auto* v : parts) {
    const int32_t n = static_cast<int32_t>(v->size());
    AppendWords(&out, &n, 1);
  }
  for (const auto* v : parts) AppendWords(&out, v->data(), v->size());
  return out;
}

// The plan's words (kind first); Internal for a malformed message.
absl::StatusOr<std::vector<int32_t>> PlanWords(const std::string& bytes) {
  if (bytes.empty() || bytes.size() % sizeof(int32_t) != 0) {
    return absl::InternalError(absl::StrCat("malformed step plan of ", bytes.size(), " bytes"));
  }
  std::vector<int32_t> words(bytes.size() / sizeof(int32_t));
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

absl::StatusOr<StepBatch> DecodeForward(const std::vector<int32_t>& words) {
  constexpr size_t kHeader = 7;  // kind, max_blocks_per_seq, five sizes
  if (words.size() < kHeader) return absl::InternalError("truncated forward plan");
  StepBatch batch;
  batch.max_blocks_per_seq = words[1];
  std::vector<int32_t>* parts[] = {&batch.token_ids, &batch.query_start, &batch.context_len,
                                   &batch.block_tables, &batch.logit_rows};
  size_t at = kHeader;
  for (int i = 0; i < 5; ++i) {
    const int64_t n = words[2 + i];
    if (n < 0 || at + static_cast<size_t>(n) > words.size()) {
      return absl::InternalError("truncated forward plan");
    }
    parts[i]->assign(words.begin() + at, words.begin() + at + n);
    at += static_cast<size_t>(n);
  }
  if (at != words.size()) return absl::InternalError("forward plan has trailing words");
  return batch;
}

// One rank per process, started by mpirun (rank and world from MPI_COMM_WORLD). Rank 0, the
// leader, is driven like any runner (by the engine or a BatchGenerator): each AllocateKvCache,
// KvCacheBytesFromMemory (CUDA) and Forward is first broadcast as a plan over `control_`, then
// run on the leader's own slice; the followers sit in RunFollower executing the same plans, so
// the model's collectives (over `data_`: MPI on the CPU, NCCL on CUDA) pair up. The leader's
// destructor broadcasts kShutdown, which ends RunFollower.
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
// Thread-safety: as ModelRunner. All work runs on `worker_`; only the leader may call the
// leader's methods, only followers RunFollower.
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
    BLOSSOM_RETURN_IF_ERROR(LeaderOnly("Forward"));
    if (!has_cache_) {
      return absl::FailedPreconditionError("ModelRunner::Forward before AllocateKvCache");
    }
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the tensor-parallel processes are out of step since an earlier failure (",
          broken_.message(), "); restart the job"));
    }
    return worker_.Run([&]() -> absl::Status {
      std::string plan = EncodeForward(batch);
      absl::Status s = control_->Broadcast(0, &plan);
      if (s.ok()) s = model_->Forward(batch, *cache_, logits);
      if (!s.ok() && GroupBroken()) broken_ = s;
      if (!s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("tensor-parallel rank 0 of ", world_size(), ": ",
                                         s.message()));
      }
      return s;
    });
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
            (void)AllocateHere(words[1], words[2]);  // the leader reports the agreed status
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
    BLOSSOM_RETURN_IF_ERROR(control_->AgreeOnStatus(s));
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
      CudaBackend::Options backend_options;
      backend_options.device = nccl_->device();
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
        threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                  std::max(1, process_.local_size));
      }
      backend_ = std::make_unique<CpuBackend>(threads);
    }
    ModelLoadOptions load;
    load.prefetch = false;  // done above
    load.strict_load = options.strict_load;
    load.quantize = options.quantize;
    load.quantize_lm_head = options.quantize_lm_head;
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
  int64_t kv_bytes_ = 0;          // leader: the cache's bytes per rank
  absl::Status broken_;           // leader: the failure that aborted the data communicator
  bool follower_done_ = false;    // follower: kShutdown received
  bool loaded_ = false;           // Create succeeded on every rank
};

}  // namespace

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
  return std::make_unique<SingleRankRunner>(nullptr, nullptr, model, 0.0,
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
    return MpiRunner::Create(options, process);
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
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / tp);
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

  BackendFactory make_backend = [threads](int) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(threads));
  };
  GroupFactory make_group =
      [tp](const std::vector<Backend*>&) -> absl::StatusOr<std::unique_ptr<RankGroup>> {
    return std::unique_ptr<RankGroup>(std::make_unique<ThreadRankGroup>(tp));
  };
#ifdef BLOSSOM_HAVE_CUDA
  if (cuda) {
    // Rank r on GPU r; created on the thread that will drive it (see MultiRankRunner).
    make_backend = [tp](int rank) -> absl::StatusOr<std::unique_ptr<Backend>> {
      CudaBackend::Options backend_options;
      backend_options.device = rank;
      BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                               CudaBackend::Create(backend_options));
      spdlog::info("model rank {}/{}: GPU {}: {}", rank, tp, rank, backend->device_name());
      return std::unique_ptr<Backend>(std::move(backend));
    };
    make_group = NcclRankGroup::Create;
  }
#endif

  if (tp == 1) {
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(0));
    ModelLoadOptions load;
    load.prefetch = false;
    load.strict_load = options.strict_load;
    load.quantize = options.quantize;
    load.quantize_lm_head = options.quantize_lm_head;
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<BloomModel> model,
                             BloomModel::Load(checkpoint, backend.get(), nullptr, load));
    LogWeights(model->info());
    BloomModel* raw = model.get();
    return std::unique_ptr<ModelRunner>(new SingleRankRunner(
        std::move(backend), std::move(model), raw, open_seconds, options.gpu_memory_fraction));
  }
  auto runner = std::make_unique<MultiRankRunner>(tp, options.gpu_memory_fraction);
  BLOSSOM_RETURN_IF_ERROR(runner->Load(checkpoint, open_seconds, make_backend, make_group,
                                       options.strict_load, options.quantize,
                                       options.quantize_lm_head));
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace blossom
