// cuBLASLt GEMMs for CudaBackend::Linear: out[M, N] = x[M, K] w[N, K]^T, optionally with the
// bias or bias+GELU applied in cuBLASLt's epilogue.
//
// Plans (matmul descriptor, layouts, candidate algorithms) are cached per shape, dtype,
// epilogue and operand alignment, with M bucketed (GemmRowBucket in gemm_plan_policy.h: 1, 2,
// 4, ..., 256, then multiples of 256), so the plans form a fixed set a warm-up can create; each
// call sets the layouts to its own M. cuBLASLt's heuristic is asked for up to kMaxCandidates
// algorithms once per key. With set_time_candidates(true), a new plan's candidates are timed on
// its first call (one untimed run each, then kTimedRuns timed on the stream, a host sync) and
// ordered fastest first. Never while the stream is being captured into a CUDA graph: the
// heuristic's order is used there and the next uncaptured call times. So the timing belongs in
// a warm-up that runs every bucket before serving. When the chosen algorithm refuses the
// operands at run time, the next is tried. A key with no usable algorithm is remembered (no
// retry per step) and reported once on stderr, so a shape that silently runs a slower path is
// visible in the log; the caller then retries with a plainer epilogue before giving up on
// cuBLASLt (see CudaBackend::Linear).
//
// Thread-safety: none; owned by one CudaBackend and used on its stream only.
#ifndef BLOSSOM_KERNELS_CUDA_LT_GEMM_H_
#define BLOSSOM_KERNELS_CUDA_LT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace blossom {

class LtGemm {
 public:
  static constexpr int kMaxCandidates = 4;
  static constexpr int kTimedRuns = 3;

  // `workspace` (may be null when workspace_bytes is 0) stays owned by the caller.
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(void* workspace, size_t workspace_bytes,
                                                        cudaStream_t stream);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // out = x w^T (+ bias) (then GELU if `gelu`), all on the stream. *done is false (and nothing
  // was launched) when cuBLASLt has no algorithm for these operands and this epilogue. An empty
  // `bias` means no bias in the epilogue.
  absl::Status Matmul(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu, Tensor out,
                      bool* done);

  // Whether new plans time their candidates on their first call (see the class comment).
  void set_time_candidates(bool on) { time_candidates_ = on; }

  // Largest power of two (<= 256) dividing the address: cuBLASLt picks kernels by alignment.
  static uint32_t AlignmentOf(const void* p);
  // cuBLAS's type for a float DType (F32 for anything that is not F16 or BF16).
  static cudaDataType_t CudaDataType(DType dtype);

 private:
  struct Key {
    int64_t m, n, k;  // m: the bucket (GemmRowBucket), not the call's rows
    int a_type, c_type, bias_type, epilogue;
    uint32_t align_a, align_b, align_c, align_bias;
    bool operator<(const Key& o) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    std::vector<cublasLtMatmulAlgo_t> algos;  // heuristic order; the first usable one is used
    size_t next = 0;                          // index of the algorithm in use
    uint64_t rows = 0;                        // M the layouts are set to now
    bool timed = false;                       // candidates timed (or timing not possible)
    bool usable() const { return next < algos.size(); }
  };

  LtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes, cudaStream_t stream);
  absl::StatusOr<Plan*> PlanFor(const Key& key, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& out);
  static void ReportUnusable(const Key& key, const char* why);
  // Points the plan's layouts at `m` rows.
  absl::Status SetRows(Plan& plan, uint64_t m);
  // Orders plan.algos by measured time on these operands (see the class comment).
  absl::Status TimeCandidates(Plan& plan, const Tensor& x, const Tensor& weight, Tensor out);
  cublasStatus_t Run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Tensor& x,
                     const Tensor& weight, Tensor out);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  cudaStream_t stream_;
  std::map<Key, Plan> plans_;
  bool time_candidates_ = false;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_LT_GEMM_H_
