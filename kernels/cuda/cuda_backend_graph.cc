// CudaBackend's step capture (the compute stream captured into a CUDA graph and replayed) and
// what a warm-up before capturing must run.
#include <cuda_runtime.h>

#include <memory>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/gemm_plan_policy.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

// elementwise.cu's SplitQkvKernel skips slot -1 (it cannot include backend.h).
static_assert(kPaddingSlot == -1, "the CUDA kernels take -1 for the padding slot");

class CudaStepGraph : public StepGraph {
 public:
  CudaStepGraph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, std::shared_ptr<void> workspace)
      : graph_(graph), exec_(exec), stream_(stream), workspace_(std::move(workspace)) {}
  ~CudaStepGraph() override {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  absl::Status Replay() override {
    const cudaError_t err = cudaGraphLaunch(exec_, stream_);
    if (err != cudaSuccess) {
      return CudaError("cudaGraphLaunch", err);
    }
    return absl::OkStatus();
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  std::shared_ptr<void> workspace_;  // the attention workspace the captured kernels read
};

}  // namespace

std::vector<int64_t> CudaBackend::WarmUpRowCounts(int64_t max_rows) const {
  return GemmRowBuckets(max_rows);
}

absl::Status CudaBackend::RefuseWhileCapturing(const char* what) const {
  return impl_->capturing.load() ? RefusedWhileCapturing(what) : absl::OkStatus();
}

absl::Status CudaBackend::BeginCapture() {
  if (impl_->capturing.load()) return absl::FailedPreconditionError("BeginCapture: a capture is already open");
  const cudaError_t err = cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return CudaError("cudaStreamBeginCapture", err);
  }
  impl_->capturing.store(true);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepGraph>> CudaBackend::EndCapture() {
  if (!impl_->capturing.load()) return absl::FailedPreconditionError("EndCapture without BeginCapture");
  impl_->capturing.store(false);
  cudaGraph_t graph = nullptr;
  // Ends the capture even when an op spoiled it (then it fails and returns no graph), so the
  // stream is usable again either way.
  cudaError_t err = cudaStreamEndCapture(impl_->stream, &graph);
  if (err != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    return CudaError("cudaStreamEndCapture", err);
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    return CudaError("cudaGraphInstantiate", err);
  }
  return std::unique_ptr<StepGraph>(new CudaStepGraph(graph, exec, impl_->stream, impl_->attention_workspace));
}

}  // namespace blossom
