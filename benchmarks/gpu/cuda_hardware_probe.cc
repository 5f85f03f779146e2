#include "benchmarks/gpu/cuda_hardware_probe.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/lt_gemm.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

absl::Status CudaError(const char* what, cudaError_t err) {
  return absl::InternalError(absl::StrCat("cuda probe: ", what, ": ", cudaGetErrorName(err), " (",
                                          cudaGetErrorString(err), ")"));
}

#define BLOSSOM_PROBE_CUDA(expr)                                                  \
  do {                                                                            \
    const cudaError_t blossom_probe_err_ = (expr);                                \
    if (blossom_probe_err_ != cudaSuccess) return CudaError(#expr, blossom_probe_err_); \
  } while (0)

#define BLOSSOM_PROBE_CUBLAS(expr)                                                     \
  do {                                                                                 \
    const cublasStatus_t blossom_probe_st_ = (expr);                                   \
    if (blossom_probe_st_ != CUBLAS_STATUS_SUCCESS)                                    \
      return absl::InternalError(absl::StrCat("cuda probe: ", #expr, ": ",             \
                                              cublasGetStatusString(blossom_probe_st_))); \
  } while (0)

// RAII owners, so that every early return frees what was made (the probe runs inside a process
// that goes on to fill the GPU with a KV cache).
struct DeviceMemory {
  void* ptr = nullptr;
  ~DeviceMemory() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};
struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() {
    if (s != nullptr) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
};
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~EventPair() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};
struct LtObjects {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

// Allocation failure is ResourceExhausted (the caller can pass --mem-bandwidth-gbs instead), not
// Internal; the sticky-free error is cleared so the process can go on.
absl::Status Allocate(DeviceMemory* mem, size_t bytes, const char* what) {
  const cudaError_t err = cudaMalloc(&mem->ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    mem->ptr = nullptr;
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda probe: cannot allocate ", bytes, " bytes for ", what));
  }
  BLOSSOM_PROBE_CUDA(err);
  return absl::OkStatus();
}

// xorshift64*: fast, deterministic, good enough to keep tensor cores off the zero fast path.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float Uniform() {  // [-1, 1)
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t r = state_ * 0x2545F4914F6CDD1Dull;
    return static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }

 private:
  uint64_t state_;
};

// Fills `elements` values of `dtype` at `dst` with uniform [-1, 1) in chunks (bounded host memory)
// and returns the first `keep` of them, rounded to `dtype`, for the host check.
absl::Status FillRandom(void* dst, DType dtype, int64_t elements, uint64_t seed, int64_t keep,
                        std::vector<float>* kept) {
  constexpr int64_t kChunk = 1 << 22;
  const size_t esize = DTypeSize(dtype);
  std::vector<float> f32(static_cast<size_t>(std::min(elements, kChunk)));
  std::vector<char> converted(f32.size() * esize);
  Rng rng(seed);
  kept->clear();
  for (int64_t done = 0; done < elements; done += kChunk) {
    const int64_t n = std::min(kChunk, elements - done);
    for (int64_t i = 0; i < n; ++i) f32[i] = rng.Uniform();
    ConvertFromF32(f32.data(), converted.data(), dtype, static_cast<size_t>(n));
    for (int64_t i = 0; i < n && done + i < keep; ++i) {
      kept->push_back(LoadAsFloat(converted.data(), dtype, i));
    }
    BLOSSOM_PROBE_CUDA(cudaMemcpy(static_cast<char*>(dst) + done * esize, converted.data(),
                                  static_cast<size_t>(n) * esize, cudaMemcpyHostToDevice));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaHardwareProbe>> CudaHardwareProbe::Create(
    const CudaProbeOptions& options) {
  if (options.copy_bytes <= 0 || options.repetitions <= 0 || options.warmup < 0 ||
      options.gemm_m <= 0 || options.gemm_n <= 0 || options.gemm_k <= 0) {
    return absl::InvalidArgumentError(
        "cuda probe: copy_bytes, GEMM sizes and repetitions must be positive, warmup >= 0");
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cuda probe: no usable GPU: cudaGetDeviceCount: ", cudaGetErrorString(err)));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("cuda probe: device ", options.device,
                                                      " requested, ", count, " visible"));
  }
  cudaDeviceProp prop;
  BLOSSOM_PROBE_CUDA(cudaGetDeviceProperties(&prop, options.device));
  std::string name =
      absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ", ",
                   static_cast<int64_t>(prop.totalGlobalMem >> 20), " MiB)");
  return std::unique_ptr<CudaHardwareProbe>(new CudaHardwareProbe(options, std::move(name)));
}

CudaHardwareProbe::CudaHardwareProbe(const CudaProbeOptions& options, std::string device_name)
    : options_(options), device_name_(std::move(device_name)) {}

std::string CudaHardwareProbe::Describe() const {
  return absl::StrCat("cuda device ", options_.device, ": ", device_name_);
}

absl::StatusOr<double> CudaHardwareProbe::MeasureCopyBandwidth() {
  BLOSSOM_PROBE_CUDA(cudaSetDevice(options_.device));
  const size_t bytes = static_cast<size_t>(options_.copy_bytes);
  DeviceMemory src, dst;
  BLOSSOM_RETURN_IF_ERROR(Allocate(&src, bytes, "the copy source"));
  BLOSSOM_RETURN_IF_ERROR(Allocate(&dst, bytes, "the copy destination"));
  // Non-zero source, zeroed destination: the check below proves the copy happened, and the
  // first touch of both buffers (page mapping) is out of the timed runs.
  BLOSSOM_PROBE_CUDA(cudaMemset(src.ptr, 0x5a, bytes));
  BLOSSOM_PROBE_CUDA(cudaMemset(dst.ptr, 0, bytes));
  Stream stream;
  BLOSSOM_PROBE_CUDA(cudaStreamCreateWithFlags(&stream.s, cudaStreamNonBlocking));
  EventPair ev;
  BLOSSOM_PROBE_CUDA(cudaEventCreate(&ev.start));
  BLOSSOM_PROBE_CUDA(cudaEventCreate(&ev.stop));
  float best_ms = 0.0f;
  for (int r = 0; r < options_.warmup + options_.repetitions; ++r) {
    BLOSSOM_PROBE_CUDA(cudaEventRecord(ev.start, stream.s));
    BLOSSOM_PROBE_CUDA(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, stream.s));
    BLOSSOM_PROBE_CUDA(cudaEventRecord(ev.stop, stream.s));
    BLOSSOM_PROBE_CUDA(cudaEventSynchronize(ev.stop));
    float ms = 0.0f;
    BLOSSOM_PROBE_CUDA(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    if (r >= options_.warmup && ms > 0.0f && (best_ms == 0.0f || ms < best_ms)) best_ms = ms;
  }
  unsigned char last = 0;
  BLOSSOM_PROBE_CUDA(cudaMemcpy(&last, static_cast<char*>(dst.ptr) + bytes - 1, 1,
                                cudaMemcpyDeviceToHost));
  if (last != 0x5a) return absl::InternalError("cuda probe: the device copy did not happen");
  if (!(best_ms > 0.0f)) return absl::InternalError("cuda probe: copy timed at 0 ms");
  return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3);
}

absl::StatusOr<double> CudaHardwareProbe::MeasureGemmFlops(DType weight_dtype) {
  if (!IsFloat(weight_dtype)) {
    return absl::InvalidArgumentError("cuda probe: the GEMM probe needs a float weight dtype");
  }
  BLOSSOM_PROBE_CUDA(cudaSetDevice(options_.device));
  const int64_t m = options_.gemm_m, n = options_.gemm_n, k = options_.gemm_k;
  const size_t esize = DTypeSize(weight_dtype);
  DeviceMemory x, w, out, workspace;
  BLOSSOM_RETURN_IF_ERROR(Allocate(&x, static_cast<size_t>(m * k) * esize, "the GEMM input"));
  BLOSSOM_RETURN_IF_ERROR(Allocate(&w, static_cast<size_t>(n * k) * esize, "the GEMM weight"));
  BLOSSOM_RETURN_IF_ERROR(Allocate(&out, static_cast<size_t>(m * n) * esize, "the GEMM output"));
  BLOSSOM_RETURN_IF_ERROR(
      Allocate(&workspace, options_.gemm_workspace_bytes, "the cuBLASLt workspace"));
  std::vector<float> x_row0, w_row0;  // x[0, :] and w[0, :] as stored, for the check below
  BLOSSOM_RETURN_IF_ERROR(FillRandom(x.ptr, weight_dtype, m * k, 1, k, &x_row0));
  BLOSSOM_RETURN_IF_ERROR(FillRandom(w.ptr, weight_dtype, n * k, 2, k, &w_row0));
  // Poison the output (all-ones bytes: NaN in every float dtype) so an unwritten result fails.
  BLOSSOM_PROBE_CUDA(cudaMemset(out.ptr, 0xff, static_cast<size_t>(m * n) * esize));

  // The layout CudaBackend::Linear uses: row-major out[M,N] = x[M,K] w[N,K]^T is column-major
  // out^T[N,M] = op(A) B with A = w seen as K x N (transposed) and B = x seen as K x M.
  LtObjects lt;
  BLOSSOM_PROBE_CUBLAS(cublasLtCreate(&lt.handle));
  BLOSSOM_PROBE_CUBLAS(cublasLtMatmulDescCreate(&lt.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  BLOSSOM_PROBE_CUBLAS(
      cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  BLOSSOM_PROBE_CUBLAS(
      cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cudaDataType_t type = LtGemm::CudaDataType(weight_dtype);
  BLOSSOM_PROBE_CUBLAS(cublasLtMatrixLayoutCreate(&lt.a, type, k, n, k));
  BLOSSOM_PROBE_CUBLAS(cublasLtMatrixLayoutCreate(&lt.b, type, k, m, k));
  BLOSSOM_PROBE_CUBLAS(cublasLtMatrixLayoutCreate(&lt.c, type, n, m, n));
  BLOSSOM_PROBE_CUBLAS(cublasLtMatmulPreferenceCreate(&lt.pref));
  const uint64_t ws = options_.gemm_workspace_bytes;
  BLOSSOM_PROBE_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heuristic;
  int returned = 0;
  BLOSSOM_PROBE_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt.handle, lt.desc, lt.a, lt.b, lt.c, lt.c,
                                                      lt.pref, 1, &heuristic, &returned));
  if (returned == 0) {
    return absl::InternalError(absl::StrCat("cuda probe: cuBLASLt has no ", DTypeName(weight_dtype),
                                            " algorithm for ", m, "x", n, "x", k));
  }
  Stream stream;
  BLOSSOM_PROBE_CUDA(cudaStreamCreateWithFlags(&stream.s, cudaStreamNonBlocking));
  EventPair ev;
  BLOSSOM_PROBE_CUDA(cudaEventCreate(&ev.start));
  BLOSSOM_PROBE_CUDA(cudaEventCreate(&ev.stop));
  const float alpha = 1.0f, beta = 0.0f;
  float best_ms = 0.0f;
  for (int r = 0; r < options_.warmup + options_.repetitions; ++r) {
    BLOSSOM_PROBE_CUDA(cudaEventRecord(ev.start, stream.s));
    BLOSSOM_PROBE_CUBLAS(cublasLtMatmul(lt.handle, lt.desc, &alpha, w.ptr, lt.a, x.ptr, lt.b, &beta,
                                        out.ptr, lt.c, out.ptr, lt.c, &heuristic.algo, workspace.ptr,
                                        options_.gemm_workspace_bytes, stream.s));
    BLOSSOM_PROBE_CUDA(cudaEventRecord(ev.stop, stream.s));
    BLOSSOM_PROBE_CUDA(cudaEventSynchronize(ev.stop));
    float ms = 0.0f;
    BLOSSOM_PROBE_CUDA(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    if (r >= options_.warmup && ms > 0.0f && (best_ms == 0.0f || ms < best_ms)) best_ms = ms;
  }
  // out[0, 0] = dot(x[0, :], w[0, :]): a wrong layout or an unwritten output fails here rather
  // than producing a plausible rate. Tolerance: fp32 accumulation plus one rounding to the output
  // dtype, relative to sum |x_i w_i| (bf16 has 8 mantissa bits: 2^-8 ~ 4e-3).
  std::vector<char> got(esize);
  BLOSSOM_PROBE_CUDA(cudaMemcpy(got.data(), out.ptr, esize, cudaMemcpyDeviceToHost));
  double ref = 0.0, scale = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    ref += static_cast<double>(x_row0[i]) * w_row0[i];
    scale += std::fabs(static_cast<double>(x_row0[i]) * w_row0[i]);
  }
  const double value = LoadAsFloat(got.data(), weight_dtype, 0);
  if (!(std::fabs(value - ref) <= 1e-2 * scale + 1e-6)) {
    return absl::InternalError(absl::StrCat("cuda probe: GEMM check failed: out[0,0] = ", value,
                                            ", expected ", ref, " (scale ", scale, ")"));
  }
  if (!(best_ms > 0.0f)) return absl::InternalError("cuda probe: GEMM timed at 0 ms");
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
         (best_ms * 1e-3);
}

}  // namespace blossom
