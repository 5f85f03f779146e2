#include "engine/model/multi_rank_runner.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/rank_setup.h"
#include "engine/model/runner_sampler.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

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
                    const ModelLoadOptions& load) {
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
      BLOSSOM_ASSIGN_OR_RETURN(rank.model, BloomModel::Load(checkpoint, rank.backend.get(),
                                                            group_->communicator(r), load));
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
      // Every rank all-gathers the logits slices collectively; only rank 0 copies them out.
      return ranks_[r].model->Forward(batch, *ranks_[r].cache, r == 0 ? logits : nullptr);
    });
  }

  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) override {
    if (!has_cache_) {
      return absl::FailedPreconditionError("ModelRunner::ForwardKeepLogits before AllocateKvCache");
    }
    Tensor kept;  // written by rank 0's thread; read after the hand-off returns
    BLOSSOM_RETURN_IF_ERROR(RunOnAllRanks(/*collective=*/true, [&](int r) -> absl::Status {
      if (r != 0) return ranks_[r].model->Forward(batch, *ranks_[r].cache, nullptr);
      BLOSSOM_ASSIGN_OR_RETURN(kept, ranks_[0].model->ForwardKeepLogits(batch, *ranks_[0].cache));
      return absl::OkStatus();
    }));
    return kept;
  }

  absl::Status CopyLogitsToHost(const Tensor& rows, float* out) override {
    return RunOnRankZero([&] { return ranks_[0].backend->CopyToHost(rows, out); });
  }

  absl::Status Health() override {
    if (!unusable_.ok()) return unusable_;
    return Dispatch(/*collective=*/false, [this](int r) { return ranks_[r].backend->Health(); });
  }

  absl::StatusOr<std::unique_ptr<BatchSampler>> MakeBatchSampler() override {
    return MakeSamplerOnBackendThread(
        ranks_[0].backend.get(),
        [this](const std::function<absl::Status()>& fn) { return RunOnRankZero(fn); });
  }

 private:
  // Set when a failed collective step left a group that could not be rebuilt (engine thread).
  mutable absl::Status unusable_;
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
      unusable_ = absl::Status(rearmed.code(), absl::StrCat("the tensor-parallel group could not "
                                                            "be rebuilt: ", rearmed.message()));
      return absl::Status(status.code(), absl::StrCat(status.message(), "; ", rearmed.message()));
    }
    return status;
  }

  // fn on rank 0's thread (the others return at once): how rank 0's backend is reached between
  // steps, e.g. by the sampler.
  absl::Status RunOnRankZero(const std::function<absl::Status()>& fn) const {
    return Dispatch(/*collective=*/false,
                    [&fn](int r) { return r == 0 ? fn() : absl::OkStatus(); });
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

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRunner>> CreateMultiRankRunner(
    int world, double gpu_memory_fraction, std::shared_ptr<const Checkpoint> checkpoint,
    double open_seconds, const BackendFactory& make_backend, const GroupFactory& make_group,
    const ModelLoadOptions& load) {
  auto runner = std::make_unique<MultiRankRunner>(world, gpu_memory_fraction);
  BLOSSOM_RETURN_IF_ERROR(runner->Load(std::move(checkpoint), open_seconds, make_backend,
                                       make_group, load));
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace blossom
