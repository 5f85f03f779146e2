#include "engine/model/model_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/loader/checkpoint.h"
#include "engine/loader/progress_bar.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_communicator.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void LogWeights(const ModelInfo& info) {
  spdlog::info("model rank {}/{}: weights {:.2f} MiB ({}, backend {})", info.rank,
               info.world_size, MiB(info.weight_bytes_this_rank), DTypeName(info.weight_dtype),
               info.backend);
}

void LogKv(int rank, int world, int32_t num_blocks, int32_t block_size, size_t per_block) {
  spdlog::info("model rank {}/{}: KV cache {} blocks x {} tokens = {:.2f} MiB", rank, world,
               num_blocks, block_size, MiB(static_cast<uint64_t>(per_block) * num_blocks));
}

// One rank, run on the caller's thread.
class SingleRankRunner : public ModelRunner {
 public:
  SingleRankRunner(std::unique_ptr<Backend> backend, std::unique_ptr<BloomModel> owned_model,
                   BloomModel* model, double extra_load_seconds)
      : backend_(std::move(backend)),
        owned_model_(std::move(owned_model)),
        model_(model),
        info_(model->info()) {
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
    BLOSSOM_ASSIGN_OR_RETURN(cache_, model_->CreateKvCache(num_blocks, block_size));
    LogKv(0, 1, num_blocks, block_size, model_->KvBytesPerBlock(block_size));
    return absl::OkStatus();
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
  std::unique_ptr<KvCache> cache_;
};

// tp > 1 in one process: a thread per rank, each owning its backend, model slice and KV cache.
// Invariant: between calls to RunOnAllRanks every rank thread is idle, waiting for a task; so
// the group can be re-armed after a failure and the caller's thread never races a rank.
class MultiRankRunner : public ModelRunner {
 public:
  MultiRankRunner(int world, int threads_per_rank)
      : group_(world), ranks_(static_cast<size_t>(world)) {
    for (int r = 0; r < world; ++r) {
      ranks_[r].backend = std::make_unique<CpuBackend>(threads_per_rank);
      ranks_[r].thread = std::thread([this, r] { RankLoop(r); });
    }
  }

  ~MultiRankRunner() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    task_cv_.notify_all();
    for (Rank& rank : ranks_)
      if (rank.thread.joinable()) rank.thread.join();
    // Each rank's cache and model go before its backend (Rank's member order).
  }

  absl::Status Load(std::shared_ptr<const Checkpoint> checkpoint, double open_seconds) {
    BLOSSOM_RETURN_IF_ERROR(RunOnAllRanks([&](int r) -> absl::Status {
      Rank& rank = ranks_[r];
      ModelLoadOptions options;
      options.prefetch = false;  // the shared mapping was prefetched once by Create
      BLOSSOM_ASSIGN_OR_RETURN(rank.model, BloomModel::Load(checkpoint, rank.backend.get(),
                                                            group_.communicator(r), options));
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
    BLOSSOM_RETURN_IF_ERROR(RunOnAllRanks([&](int r) -> absl::Status {
      Rank& rank = ranks_[r];
      rank.cache.reset();
      BLOSSOM_ASSIGN_OR_RETURN(rank.cache, rank.model->CreateKvCache(num_blocks, block_size));
      return absl::OkStatus();
    }));
    for (int r = 0; r < world_size(); ++r)
      LogKv(r, world_size(), num_blocks, block_size, ranks_[r].model->KvBytesPerBlock(block_size));
    has_cache_ = true;
    return absl::OkStatus();
  }

  absl::Status Forward(const StepBatch& batch, float* logits) override {
    if (!has_cache_) {
      return absl::FailedPreconditionError("ModelRunner::Forward before AllocateKvCache");
    }
    return RunOnAllRanks([&](int r) {
      // Every rank assembles the gathered logits collectively; only rank 0 copies them out.
      return ranks_[r].model->Forward(batch, *ranks_[r].cache, r == 0 ? logits : nullptr);
    });
  }

 private:
  struct Rank {
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<BloomModel> model;
    std::unique_ptr<KvCache> cache;
    std::thread thread;
  };

  // Runs fn(rank) on every rank thread and waits for all of them. On failure returns the first
  // error (the cause: a rank that fails aborts the group, so the others' Aborted errors come
  // later), then re-arms the group.
  absl::Status RunOnAllRanks(std::function<absl::Status(int)> fn) {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = std::move(fn);
    pending_ = world_size();
    first_error_ = absl::OkStatus();
    ++task_generation_;
    task_cv_.notify_all();
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
    if (first_error_.ok()) return absl::OkStatus();
    group_.Reset();  // every rank is idle again
    return first_error_;
  }

  void RankLoop(int r) {
    uint64_t seen = 0;
    while (true) {
      std::function<absl::Status(int)> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        task_cv_.wait(lock, [&] { return stopping_ || task_generation_ != seen; });
        if (stopping_) return;
        seen = task_generation_;
        task = task_;
      }
      absl::Status s = task(r);
      if (!s.ok()) {
        s = absl::Status(s.code(), absl::StrCat("tensor-parallel rank ", r, " of ", world_size(),
                                                ": ", s.message()));
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (first_error_.ok()) first_error_ = s;
        }
        group_.Abort(s);  // wake ranks waiting for this one in a collective
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  ThreadCommunicatorGroup group_;
  std::vector<Rank> ranks_;
  ModelInfo info_;  // rank 0's, load time including the shared open and prefetch
  bool has_cache_ = false;  // caller's thread only

  std::mutex mutex_;
  std::condition_variable task_cv_, done_cv_;
  std::function<absl::Status(int)> task_;  // guarded by mutex_
  uint64_t task_generation_ = 0;           // guarded by mutex_
  int pending_ = 0;                        // guarded by mutex_
  absl::Status first_error_;               // guarded by mutex_
  bool stopping_ = false;  // guarded by mutex_
};

}  // namespace

ModelRunner::~ModelRunner() = default;

std::unique_ptr<ModelRunner> ModelRunner::ForModel(BloomModel* model) {
  return std::make_unique<SingleRankRunner>(nullptr, nullptr, model, 0.0);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const ModelRunnerOptions& options) {
  if (options.backend == "cuda") {
    return absl::UnimplementedError("the CUDA backend is not built into this runner yet");
  }
  if (options.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", options.backend, "' (expected: cpu, cuda)"));
  }
  const int tp = options.tensor_parallel_size;
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel size must be at least 1, got ", tp));
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

  if (tp == 1) {
    auto backend = std::make_unique<CpuBackend>(threads);
    ModelLoadOptions load;
    load.prefetch = false;
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<BloomModel> model,
                             BloomModel::Load(checkpoint, backend.get(), nullptr, load));
    LogWeights(model->info());
    BloomModel* raw = model.get();
    return std::unique_ptr<ModelRunner>(
        new SingleRankRunner(std::move(backend), std::move(model), raw, open_seconds));
  }
  auto runner = std::make_unique<MultiRankRunner>(tp, threads);
  BLOSSOM_RETURN_IF_ERROR(runner->Load(checkpoint, open_seconds));
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace blossom
