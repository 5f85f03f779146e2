#include "kernels/cpu/op_recorder.h"


namespace blossom {
namespace {

class RecordedGraph : public StepGraph {
 public:
  explicit RecordedGraph(std::vector<OpRecorder::Op> ops) : ops_(std::move(ops)) {}
  absl::Status Replay() override {
    for (const OpRecorder::Op& op : ops_) {
      absl::Status status = op();
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<OpRecorder::Op> ops_;
};

}  // namespace

absl::Status OpRecorder::Begin() {
  if (capturing()) return absl::FailedPreconditionError("BeginCapture: a capture is already open");
  ops_.clear();
  capturing_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepGraph>> OpRecorder::End() {
  if (!capturing()) return absl::FailedPreconditionError("EndCapture without BeginCapture");
  capturing_.store(false, std::memory_order_release);
  std::vector<Op> ops;
  ops.swap(ops_);
  return std::unique_ptr<StepGraph>(new RecordedGraph(std::move(ops)));
}

absl::Status OpRecorder::RefuseWhileCapturing(absl::string_view what) const {
  return capturing() ? RefusedWhileCapturing(what) : absl::OkStatus();
}

}  // namespace blossom
