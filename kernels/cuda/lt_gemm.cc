#include "kernels/cuda/lt_gemm.h"

#include <cstdio>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gemm_plan_policy.h"

namespace blossom {
namespace {

#define BLOSSOM_CUBLAS_RETURN_IF_ERROR(expr)                                               \
  do {                                                                                     \
    const cublasStatus_t blossom_cublas_st_ = (expr);                                      \
    if (blossom_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                       \
      return absl::InternalError(absl::StrCat("cuda backend: ", #expr, ": ",               \
                                              cublasGetStatusString(blossom_cublas_st_))); \
  } while (0)

}  // namespace

cudaDataType_t LtGemm::CudaDataType(DType d) {
  switch (d) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

namespace {

const char* EpilogueName(int epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "bias+gelu";
    case CUBLASLT_EPILOGUE_BIAS:
      return "bias";
    case CUBLASLT_EPILOGUE_GELU:
      return "gelu";
    default:
      return "none";
  }
}

}  // namespace

uint32_t LtGemm::AlignmentOf(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

bool LtGemm::Key::operator<(const Key& o) const {
  return std::tie(m, n, k, a_type, c_type, bias_type, epilogue, align_a, align_b, align_c, align_bias) <
         std::tie(o.m, o.n, o.k, o.a_type, o.c_type, o.bias_type, o.epilogue, o.align_a, o.align_b, o.align_c,
                  o.align_bias);
}

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(void* workspace, size_t workspace_bytes,
                                                       cudaStream_t stream) {
  cublasLtHandle_t handle = nullptr;
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  return std::unique_ptr<LtGemm>(new LtGemm(handle, workspace, workspace_bytes, stream));
}

LtGemm::LtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes, cudaStream_t stream)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes), stream_(stream) {}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) {
    if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
    if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

void LtGemm::ReportUnusable(const Key& key, const char* why) {
  // Once per key (the key is then cached as unusable): a shape that quietly runs a slower path
  // must show in the log.
  std::fprintf(stderr,
               "cuda backend: cuBLASLt %s for M bucket %lld N=%lld K=%lld (dtype %d -> %d, epilogue %s); "
               "falling back to a plainer path for this shape\n",
               why, static_cast<long long>(key.m), static_cast<long long>(key.n), static_cast<long long>(key.k),
               key.a_type, key.c_type, EpilogueName(key.epilogue));
}

absl::StatusOr<LtGemm::Plan*> LtGemm::PlanFor(const Key& key, const Tensor& x, const Tensor& weight,
                                              const Tensor& bias, const Tensor& out) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  Plan plan;
  const int64_t m = key.m, n = key.n, k = key.k;
  const cublasLtEpilogue_t epilogue = static_cast<cublasLtEpilogue_t>(key.epilogue);
  // Row-major out[M,N] = x[M,K] w[N,K]^T is column-major out^T[N,M] = op(A) B with A = w
  // seen as a K x N column-major matrix (transposed) and B = x seen as K x M.
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (!bias.empty()) {
    const cudaDataType_t bt = CudaDataType(bias.dtype);
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.a, CudaDataType(weight.dtype), k, n, k));
  // m is the bucket: the heuristic chooses for it; Matmul sets each call's own rows.
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.b, CudaDataType(x.dtype), k, m, k));
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.c, CudaDataType(out.dtype), n, m, n));
  plan.rows = static_cast<uint64_t>(m);
  cublasLtMatmulPreference_t pref = nullptr;
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a,
                                       sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b,
                                       sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c,
                                       sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c,
                                       sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t results[kMaxCandidates];
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                                           pref, kMaxCandidates, results, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < returned; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.algos.push_back(results[i].algo);
    }
  }
  if (plan.algos.empty()) ReportUnusable(key, "has no algorithm");
  return &plans_.emplace(key, std::move(plan)).first->second;
}

absl::Status LtGemm::SetRows(Plan& plan, uint64_t m) {
  if (plan.rows == m) return absl::OkStatus();
  // Column-major B is K x M and C is N x M: M is the layouts' column count.
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutSetAttribute(plan.b, CUBLASLT_MATRIX_LAYOUT_COLS, &m, sizeof(m)));
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutSetAttribute(plan.c, CUBLASLT_MATRIX_LAYOUT_COLS, &m, sizeof(m)));
  plan.rows = m;
  return absl::OkStatus();
}

cublasStatus_t LtGemm::Run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Tensor& x,
                           const Tensor& weight, Tensor out) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle_, plan.desc, &alpha, weight.data, plan.a, x.data, plan.b, &beta,
                        out.data, plan.c, out.data, plan.c, &algo, workspace_, workspace_bytes_,
                        stream_);
}

absl::Status LtGemm::TimeCandidates(Plan& plan, const Tensor& x, const Tensor& weight,
                                    Tensor out) {
  if (plan.algos.size() < 2) {
    plan.timed = true;  // nothing to choose between
    return absl::OkStatus();
  }
  // Timing synchronises the host with the stream, which a graph capture forbids: keep the
  // heuristic's order for this call and time on the next uncaptured one.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return absl::OkStatus();
  }
  plan.timed = true;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    if (start != nullptr) cudaEventDestroy(start);
    cudaGetLastError();
    return absl::InternalError("cuda backend: cannot create the events that time GEMM candidates");
  }
  // Every run computes the same product into `out`; the caller's run overwrites it again.
  std::vector<float> millis(plan.algos.size(), -1.0f);
  absl::Status status = absl::OkStatus();
  for (size_t i = 0; i < plan.algos.size() && status.ok(); ++i) {
    const cublasStatus_t first = Run(plan, plan.algos[i], x, weight, out);  // untimed: warms up
    if (first == CUBLAS_STATUS_NOT_SUPPORTED || first == CUBLAS_STATUS_INVALID_VALUE) continue;
    if (first != CUBLAS_STATUS_SUCCESS) {
      status = absl::InternalError(
          absl::StrCat("cuda backend: timing a cuBLASLt candidate: ", cublasGetStatusString(first)));
      break;
    }
    cudaEventRecord(start, stream_);
    for (int r = 0; r < kTimedRuns; ++r) Run(plan, plan.algos[i], x, weight, out);
    cudaEventRecord(stop, stream_);
    float ms = -1.0f;
    if (cudaEventSynchronize(stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, start, stop) == cudaSuccess) {
      millis[i] = ms / kTimedRuns;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGetLastError();
  if (!status.ok()) return status;
  std::vector<cublasLtMatmulAlgo_t> ordered;
  for (int i : OrderCandidatesByTime(millis)) ordered.push_back(plan.algos[i]);
  plan.algos = std::move(ordered);
  return absl::OkStatus();
}

absl::Status LtGemm::Matmul(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu, Tensor out,
                            bool* done) {
  *done = false;
  const int64_t k = x.dim(-1), m = x.numel() / k, n = weight.dim(0);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (!bias.empty()) epilogue = gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (gelu) epilogue = CUBLASLT_EPILOGUE_GELU;
  const Key key{GemmRowBucket(m),
                n,
                k,
                static_cast<int>(x.dtype),
                static_cast<int>(out.dtype),
                bias.empty() ? -1 : static_cast<int>(bias.dtype),
                static_cast<int>(epilogue),
                AlignmentOf(weight.data),
                AlignmentOf(x.data),
                AlignmentOf(out.data),
                bias.empty() ? 256u : AlignmentOf(bias.data)};
  absl::StatusOr<Plan*> found = PlanFor(key, x, weight, bias, out);
  if (!found.ok()) return found.status();
  Plan& plan = **found;
  absl::Status rows = SetRows(plan, static_cast<uint64_t>(m));
  if (!rows.ok()) return rows;
  if (!bias.empty()) {
    const void* bias_ptr = bias.data;
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  if (time_candidates_ && !plan.timed && plan.next == 0) {
    absl::Status timed = TimeCandidates(plan, x, weight, out);
    if (!timed.ok()) return timed;
  }
  while (plan.usable()) {
    const cublasStatus_t st = Run(plan, plan.algos[plan.next], x, weight, out);
    if (st == CUBLAS_STATUS_SUCCESS) {
      *done = true;
      return absl::OkStatus();
    }
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) {
      BLOSSOM_CUBLAS_RETURN_IF_ERROR(st);
    }
    // This candidate refused the operands after all (nothing was launched): try the next.
    if (++plan.next == plan.algos.size()) ReportUnusable(key, "refused every candidate algorithm");
  }
  return absl::OkStatus();
}

}  // namespace blossom
