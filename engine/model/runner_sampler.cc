#include "engine/model/runner_sampler.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

// Set by engine/model/BUILD exactly where //kernels/cuda and //engine/sampling:cuda_batch_sampler
// are built (a toolkit at /usr/local/cuda and no --config=nocuda); these headers include no CUDA
// header.
#ifdef BLOSSOM_HAVE_CUDA
#include "engine/sampling/cuda_batch_sampler.h"
#include "kernels/cuda/cuda_backend.h"
#endif

namespace blossom {
namespace {

// Hands every call of `inner` to the thread behind `run_`. Thread-safety: as BatchSampler (one
// caller at a time); `inner_` is only touched on run_'s thread.
class ThreadBoundSampler : public BatchSampler {
 public:
  ThreadBoundSampler(std::unique_ptr<BatchSampler> inner, RunOnBackendThread run)
      : name_(inner->name()), inner_(std::move(inner)), run_(std::move(run)) {}
  ~ThreadBoundSampler() override {
    const absl::Status released = run_([this] {
      inner_.reset();
      return absl::OkStatus();
    });
    (void)released;  // a reset cannot fail
  }

  std::string name() const override { return name_; }
  absl::Status SampleBatch(const Tensor& logits, absl::Span<const SampleRow> rows,
                           std::vector<absl::StatusOr<SampleResult>>* results) override {
    return run_([&] { return inner_->SampleBatch(logits, rows, results); });
  }
  absl::Status ScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows,
                         std::vector<absl::StatusOr<SampleResult>>* results) override {
    return run_([&] { return inner_->ScoreRows(logits, rows, results); });
  }

 private:
  const std::string name_;
  std::unique_ptr<BatchSampler> inner_;
  RunOnBackendThread run_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchSampler>> MakeSamplerForBackend(Backend* backend) {
  if (backend->device() == DeviceKind::kHost) return std::make_unique<HostBatchSampler>();
#ifdef BLOSSOM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(backend)) {
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<CudaBatchSampler> sampler,
                             CudaBatchSampler::Create(cuda));
    return std::unique_ptr<BatchSampler>(std::move(sampler));
  }
#endif
  return absl::UnimplementedError(absl::StrCat(
      "no batch sampler for logits on the ", backend->name(),
      " backend's device in this build (run with device sampling off to sample on the host)"));
}

std::unique_ptr<BatchSampler> BindSamplerToThread(std::unique_ptr<BatchSampler> inner,
                                                  RunOnBackendThread run) {
  return std::make_unique<ThreadBoundSampler>(std::move(inner), std::move(run));
}

absl::StatusOr<std::unique_ptr<BatchSampler>> MakeSamplerOnBackendThread(Backend* backend,
                                                                         RunOnBackendThread run) {
  if (backend->device() == DeviceKind::kHost) return MakeSamplerForBackend(backend);
  std::unique_ptr<BatchSampler> sampler;
  BLOSSOM_RETURN_IF_ERROR(run([&]() -> absl::Status {
    BLOSSOM_ASSIGN_OR_RETURN(sampler, MakeSamplerForBackend(backend));
    return absl::OkStatus();
  }));
  return BindSamplerToThread(std::move(sampler), std::move(run));
}

}  // namespace blossom
