// CudaBackend's private state and helpers, shared by its source files: cuda_backend.cc (memory,
// copies and the ops), cuda_backend_linear.cc (Linear: cuBLASLt or the skinny GEMM),
// cuda_backend_graph.cc (step capture) and cuda_backend_gelu_check.cc (the start-up check of
// cuBLASLt's GELU epilogue). Not for other targets.
#ifndef BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_IMPL_H_
#define BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_IMPL_H_

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/lt_gemm.h"
#include "kernels/dtype.h"

namespace blossom {

// Internal, naming the failed call and CUDA's error.
inline absl::Status CudaError(const char* what, cudaError_t err) {
  return absl::InternalError(
      absl::StrCat("cuda backend: ", what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

// The kernels' element type of a float DType (the numeric values match; checked in
// cuda_backend.cc).
inline cuda::ElemType Elem(DType d) { return static_cast<cuda::ElemType>(d); }

inline bool IsFloatTensor(const Tensor& t) { return IsFloat(t.dtype) && t.data != nullptr; }

// Slot of an activation dtype in CudaBackend::Impl::gelu_epilogue.
inline int GeluSlot(DType dtype) {
  return dtype == DType::kF16 ? 1 : (dtype == DType::kBF16 ? 2 : 0);
}

struct CudaBackend::Impl {
  Options options;
  std::string device_name;
  cudaStream_t stream = nullptr;
  cudaStream_t copy_stream = nullptr;
  void* gemm_workspace = nullptr;
  std::unique_ptr<LtGemm> gemm;
  int* error_flag = nullptr;       // device
  int* host_error_flag = nullptr;  // pinned
  void* staging[2] = {nullptr, nullptr};
  cudaEvent_t staging_free[2] = {nullptr, nullptr};
  int next_staging = 0;
  cudaEvent_t weights_copied = nullptr;
  // Shared with the step graphs captured while it was current (a graph reads the workspace it
  // was captured with at every replay); cudaFree runs when the last holder lets go.
  std::shared_ptr<void> attention_workspace;
  size_t attention_workspace_bytes = 0;
  // Outgrown attention workspaces that kernels enqueued earlier may still read; let go by the
  // next Synchronize() (or the destructor), once the stream has drained. At most a few: growth
  // doubles.
  std::vector<std::shared_ptr<void>> retired_workspaces;
  // Between BeginCapture and EndCapture (read by Allocate, which any thread may call).
  std::atomic<bool> capturing{false};
  // Per activation dtype (GeluSlot): whether cuBLASLt's GELU epilogue passed the start-up check.
  bool gelu_epilogue[3] = {false, false, false};
  // Decode-sized Linear shapes whose path was decided by timing (cuda_backend_linear.cc): the
  // skinny GEMM variant, or CudaBackend::kUseCublasLt. Key: M bucket, N, K, x dtype, out dtype,
  // bias dtype (-1: none), gelu.
  using LinearShape = std::array<int64_t, 7>;
  std::map<LinearShape, int> skinny_choice;
  // Around each timed candidate: cuBLASLt and the three skinny variants. Made on first use.
  cudaEvent_t linear_timing[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (copy_stream != nullptr) cudaStreamSynchronize(copy_stream);
    gemm.reset();
    if (gemm_workspace) cudaFree(gemm_workspace);
    attention_workspace.reset();
    retired_workspaces.clear();
    if (error_flag) cudaFree(error_flag);
    if (host_error_flag) cudaFreeHost(host_error_flag);
    for (int i = 0; i < 2; ++i) {
      if (staging[i]) cudaFreeHost(staging[i]);
      if (staging_free[i]) cudaEventDestroy(staging_free[i]);
    }
    if (weights_copied) cudaEventDestroy(weights_copied);
    for (cudaEvent_t e : linear_timing) {
      if (e) cudaEventDestroy(e);
    }
    if (copy_stream) cudaStreamDestroy(copy_stream);
    if (stream) cudaStreamDestroy(stream);
  }
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_IMPL_H_
