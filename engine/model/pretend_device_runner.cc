#include "engine/model/pretend_device_runner.h"

#include <string>
#include <vector>

namespace blossom {
namespace {

// Refuses logits that are not tagged as device memory, then samples or scores them on the host.
class PretendDeviceSampler : public BatchSampler {
 public:
  PretendDeviceSampler(std::atomic<int64_t>* sampled, std::atomic<int64_t>* scored)
      : sampled_(sampled), scored_(scored) {}
  std::string name() const override { return "pretend-device"; }
  absl::Status SampleBatch(const Tensor& logits, absl::Span<const SampleRow> rows,
                           std::vector<absl::StatusOr<SampleResult>>* results) override {
    if (logits.device != DeviceKind::kCuda) {
      return absl::InvalidArgumentError("expected the runner's device logits");
    }
    *sampled_ += static_cast<int64_t>(rows.size());
    return host_.SampleBatch(WithDevice(logits, DeviceKind::kHost), rows, results);
  }
  absl::Status ScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows,
                         std::vector<absl::StatusOr<SampleResult>>* results) override {
    if (logits.device != DeviceKind::kCuda) {
      return absl::InvalidArgumentError("expected the runner's device logits");
    }
    *scored_ += static_cast<int64_t>(rows.size());
    return host_.ScoreRows(WithDevice(logits, DeviceKind::kHost), rows, results);
  }

 private:
  std::atomic<int64_t>* sampled_;
  std::atomic<int64_t>* scored_;
  HostBatchSampler host_;
};

}  // namespace

Tensor WithDevice(Tensor t, DeviceKind device) {
  t.device = device;
  return t;
}

absl::Status PretendDeviceRunner::Forward(const StepBatch& batch, float* logits) {
  ++host_forwards;
  return inner_->Forward(batch, logits);
}

absl::StatusOr<Tensor> PretendDeviceRunner::ForwardKeepLogits(const StepBatch& batch) {
  absl::StatusOr<Tensor> kept = inner_->ForwardKeepLogits(batch);
  if (!kept.ok()) return kept;
  return WithDevice(*kept, DeviceKind::kCuda);
}

absl::Status PretendDeviceRunner::CopyLogitsToHost(const Tensor& rows, float* out) {
  if (rows.device != DeviceKind::kCuda) {
    return absl::InvalidArgumentError("expected rows of the runner's device logits");
  }
  copied_rows += rows.dim(0);
  return inner_->CopyLogitsToHost(WithDevice(rows, DeviceKind::kHost), out);
}

absl::StatusOr<std::unique_ptr<BatchSampler>> PretendDeviceRunner::MakeBatchSampler() {
  return std::unique_ptr<BatchSampler>(std::make_unique<PretendDeviceSampler>(&sampled_rows, &scored_rows));
}

}  // namespace blossom
