#include "engine/model/single_rank_runner.h"

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/rank_setup.h"
#include "engine/model/runner_sampler.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) override {
    if (cache_ == nullptr) {
      return absl::FailedPreconditionError("ModelRunner::ForwardKeepLogits before AllocateKvCache");
    }
    return model_->ForwardKeepLogits(batch, *cache_);
  }
  absl::Status CopyLogitsToHost(const Tensor& rows, float* out) override {
    return model_->backend()->CopyToHost(rows, out);
  }
  StepGraphStats step_graph_stats() const override { return model_->step_graph_stats(); }
  absl::Status Health() override { return model_->backend()->Health(); }
  absl::Status WarmUp(int32_t max_step_tokens, int32_t max_logit_rows) override {
    if (cache_ == nullptr) {
      return absl::FailedPreconditionError("ModelRunner::WarmUp before AllocateKvCache");
    }
    const auto start = std::chrono::steady_clock::now();
    BLOSSOM_RETURN_IF_ERROR(model_->WarmUpLinearPlans(*cache_, max_step_tokens, max_logit_rows));
    const double plans_s = SecondsSince(start);
    if (plans_s > 0.01) spdlog::info("warm-up: GEMM plans made in {:.2f} s", plans_s);
    if (!model_->step_graphs_enabled()) return absl::OkStatus();
    BLOSSOM_RETURN_IF_ERROR(model_->WarmUpStepGraphs(*cache_));
    const StepGraphStats stats = model_->step_graph_stats();
    spdlog::info("step graphs: {} decode buckets captured in {:.2f} s{}", stats.captured,
                 SecondsSince(start) - plans_s,
                 stats.failed > 0 ? " (a capture failed: steps run uncaptured)" : "");
    return absl::OkStatus();
  }
  // On the caller's thread, like every call of this runner (see the class comment).
  absl::StatusOr<std::unique_ptr<BatchSampler>> MakeBatchSampler() override {
    return MakeSamplerForBackend(model_->backend());
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

}  // namespace

std::unique_ptr<ModelRunner> MakeSingleRankRunner(std::unique_ptr<Backend> backend,
                                                  std::unique_ptr<BloomModel> owned_model,
                                                  BloomModel* model, double extra_load_seconds,
                                                  double gpu_memory_fraction) {
  return std::make_unique<SingleRankRunner>(std::move(backend), std::move(owned_model), model,
                                            extra_load_seconds, gpu_memory_fraction);
}

}  // namespace blossom
