// Test support: a ModelRunner whose kept logits claim to be GPU memory, for checking on the CPU
// that a caller (the engine, BatchGenerator) treats device logits as a CUDA runner needs: samples
// and scores them only through the runner's sampler and reads rows only through
// CopyLogitsToHost.
//
// PretendDeviceRunner forwards every call to `inner`; ForwardKeepLogits' tensor is tagged
// DeviceKind::kCuda (the memory is still the CPU backend's). Its sampler and CopyLogitsToHost
// refuse logits not so tagged, then work on the host. It counts host forwards (Forward), rows
// copied to the host, rows sampled and rows scored (prompt logprobs). Thread-safety: the
// counters are atomic; otherwise as the ModelRunner it wraps.
#ifndef BLOSSOM_ENGINE_MODEL_PRETEND_DEVICE_RUNNER_H_
#define BLOSSOM_ENGINE_MODEL_PRETEND_DEVICE_RUNNER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "engine/model/model_runner.h"
#include "engine/sampling/batch_sampler.h"

namespace blossom {

// `t` with its device tag replaced (the data pointer is unchanged).
Tensor WithDevice(Tensor t, DeviceKind device);

class PretendDeviceRunner : public ModelRunner {
 public:
  explicit PretendDeviceRunner(ModelRunner* inner) : inner_(inner) {}

  const BloomConfig& config() const override { return inner_->config(); }
  const ModelInfo& info() const override { return inner_->info(); }
  int world_size() const override { return inner_->world_size(); }
  size_t KvBytesPerBlock(int32_t block_size) const override {
    return inner_->KvBytesPerBlock(block_size);
  }
  absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override {
    return inner_->AllocateKvCache(num_blocks, block_size);
  }
  absl::Status Forward(const StepBatch& batch, float* logits) override;
  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) override;
  absl::Status CopyLogitsToHost(const Tensor& rows, float* out) override;
  absl::StatusOr<std::unique_ptr<BatchSampler>> MakeBatchSampler() override;
  absl::Status Health() override { return inner_->Health(); }

  std::atomic<int64_t> host_forwards{0}, copied_rows{0}, sampled_rows{0}, scored_rows{0};

 private:
  ModelRunner* inner_;
};

// Test support: a PretendDeviceRunner whose steps (ForwardKeepLogits) fail from its
// `fail_from`-th call on (1-based) with DeadlineExceeded "a peer died", as a dead
// tensor-parallel peer makes them fail. With `fatal`, Health() then reports that failure (the
// group cannot be rebuilt); without, the runner stays healthy (each step fails on its own).
// Called by one thread (the engine's).
class FailingStepRunner : public PretendDeviceRunner {
 public:
  // `closed`: every step waits until Open(), so that a test can submit several requests before
  // any step runs (on a loaded machine the engine could otherwise run steps in between).
  FailingStepRunner(ModelRunner* inner, int fail_from, bool fatal = false, bool closed = false)
      : PretendDeviceRunner(inner), fail_from_(fail_from), fatal_(fatal), open_(!closed) {}
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    opened_.notify_all();
  }
  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      opened_.wait(lock, [this] { return open_; });
    }
    if (++calls_ >= fail_from_) return absl::DeadlineExceededError("a peer died");
    return PretendDeviceRunner::ForwardKeepLogits(batch);
  }
  absl::Status Health() override {
    if (fatal_ && calls_ >= fail_from_) return absl::DeadlineExceededError("a peer died");
    return PretendDeviceRunner::Health();
  }

 private:
  const int fail_from_;
  const bool fatal_;
  int calls_ = 0;  // the engine thread's
  std::mutex mu_;
  std::condition_variable opened_;
  bool open_;  // guarded by mu_
};

// Test support: a PretendDeviceRunner that runs its first `free_steps` steps (ForwardKeepLogits),
// then holds every later one until Release(): requests stay open mid-generation for as long as a
// test needs (a drain, a shutdown). Steps are called by one thread (the engine's); Release from
// any.
class HoldingRunner : public PretendDeviceRunner {
 public:
  HoldingRunner(ModelRunner* inner, int free_steps)
      : PretendDeviceRunner(inner), free_steps_(free_steps) {}
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    changed_.notify_all();
  }
  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) override {
    if (++calls_ > free_steps_) {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return released_; });
    }
    return PretendDeviceRunner::ForwardKeepLogits(batch);
  }

 private:
  const int free_steps_;
  int calls_ = 0;  // the engine thread's
  std::mutex mu_;
  std::condition_variable changed_;
  bool released_ = false;  // guarded by mu_
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_PRETEND_DEVICE_RUNNER_H_
