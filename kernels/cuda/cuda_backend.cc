#include "kernels/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

using cuda::ElemType;

static_assert(static_cast<int>(DType::kF32) == static_cast<int>(ElemType::kF32), "dtype values");
static_assert(static_cast<int>(DType::kF16) == static_cast<int>(ElemType::kF16), "dtype values");
static_assert(static_cast<int>(DType::kBF16) == static_cast<int>(ElemType::kBF16), "dtype values");

ElemType Elem(DType d) { return static_cast<ElemType>(d); }

absl::Status CudaError(const char* what, cudaError_t err) {
  return absl::InternalError(
      absl::StrCat("cuda backend: ", what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

#define BLOSSOM_CUDA_RETURN_IF_ERROR(expr)                           \
  do {                                                               \
    const cudaError_t blossom_cuda_err_ = (expr);                    \
    if (blossom_cuda_err_ != cudaSuccess) return CudaError(#expr, blossom_cuda_err_); \
  } while (0)

#define BLOSSOM_CUBLAS_RETURN_IF_ERROR(expr)                                               \
  do {                                                                                     \
    const cublasStatus_t blossom_cublas_st_ = (expr);                                      \
    if (blossom_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                       \
      return absl::InternalError(absl::StrCat("cuda backend: ", #expr, ": ",               \
                                              cublasGetStatusString(blossom_cublas_st_))); \
  } while (0)

absl::Status Check(bool ok, absl::string_view op, absl::string_view what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cuda backend: ", op, ": ", what));
}

bool IsFloatTensor(const Tensor& t) { return IsFloat(t.dtype) && t.data != nullptr; }

cudaDataType_t CudaType(DType d) {
  switch (d) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// Largest power of two (<= 256) dividing the address: cuBLASLt picks kernels by alignment.
uint32_t AlignmentOf(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

float HostBloomGelu(float x) {
  return x * 0.5f * (1.0f + std::tanh(0.79788456f * x * (1.0f + 0.044715f * x * x)));
}

class CudaKvCache : public KvCache {
 public:
  CudaKvCache(const KvCacheSpec& spec, DeviceBuffer storage) : spec_(spec), storage_(std::move(storage)) {
    layout_.base = storage_.data();
    layout_.dtype = Elem(spec.dtype);
    layout_.num_blocks = spec.num_blocks;
    layout_.block_size = spec.block_size;
    layout_.num_heads = spec.num_heads;
    layout_.head_dim = spec.head_dim;
  }
  const KvCacheSpec& spec() const override { return spec_; }
  const cuda::KvLayout& layout() const { return layout_; }

 private:
  KvCacheSpec spec_;
  DeviceBuffer storage_;
  cuda::KvLayout layout_;
};

// A cached cuBLASLt plan for one GEMM shape.
struct GemmKey {
  int64_t m, n, k;
  int a_type, c_type, bias_type, epilogue;
  uint32_t align_a, align_b, align_c, align_bias;
  bool operator<(const GemmKey& o) const {
    return std::tie(m, n, k, a_type, c_type, bias_type, epilogue, align_a, align_b, align_c, align_bias) <
           std::tie(o.m, o.n, o.k, o.a_type, o.c_type, o.bias_type, o.epilogue, o.align_a, o.align_b,
                    o.align_c, o.align_bias);
  }
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool has_algo = false;
};

}  // namespace

struct CudaBackend::Impl {
  Options options;
  std::string device_name;
  cudaStream_t stream = nullptr;
  cudaStream_t copy_stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* gemm_workspace = nullptr;
  int* error_flag = nullptr;       // device
  int* host_error_flag = nullptr;  // pinned
  void* staging[2] = {nullptr, nullptr};
  cudaEvent_t staging_free[2] = {nullptr, nullptr};
  int next_staging = 0;
  cudaEvent_t weights_copied = nullptr;
  void* attention_workspace = nullptr;
  size_t attention_workspace_bytes = 0;
  bool gelu_epilogue = false;
  std::map<GemmKey, GemmPlan> plans;

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (copy_stream != nullptr) cudaStreamSynchronize(copy_stream);
    for (auto& [key, plan] : plans) {
      if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
      if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
      if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
      if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
    }
    if (lt) cublasLtDestroy(lt);
    if (gemm_workspace) cudaFree(gemm_workspace);
    if (attention_workspace) cudaFree(attention_workspace);
    if (error_flag) cudaFree(error_flag);
    if (host_error_flag) cudaFreeHost(host_error_flag);
    for (int i = 0; i < 2; ++i) {
      if (staging[i]) cudaFreeHost(staging[i]);
      if (staging_free[i]) cudaEventDestroy(staging_free[i]);
    }
    if (weights_copied) cudaEventDestroy(weights_copied);
    if (copy_stream) cudaStreamDestroy(copy_stream);
    if (stream) cudaStreamDestroy(stream);
  }
};

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Options& options) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda backend: no usable CUDA device: cudaGetDeviceCount: ", cudaGetErrorString(err)));
  }
  if (count <= options.device) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda backend: device ", options.device, " requested but ", count, " CUDA device(s) visible"));
  }
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  cudaDeviceProp prop;
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device));
  if (prop.major < 9) {
    // The kernels are built as sm_90 SASS + compute_90 PTX; older GPUs cannot load either.
    return absl::FailedPreconditionError(absl::StrCat("cuda backend: ", prop.name, " is sm_", prop.major,
                                                      prop.minor, "; Blossom's kernels need sm_90 or newer"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->device_name = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->copy_stream, cudaStreamNonBlocking));
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&impl->lt));
  if (options.gemm_workspace_bytes > 0) {
    BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->gemm_workspace, options.gemm_workspace_bytes));
  }
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->error_flag, sizeof(int)));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl->error_flag, 0, sizeof(int), impl->stream));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&impl->host_error_flag), sizeof(int),
                                             cudaHostAllocDefault));
  *impl->host_error_flag = 0;
  for (int i = 0; i < 2; ++i) {
    BLOSSOM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&impl->staging_free[i], cudaEventDisableTiming));
  }
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&impl->weights_copied, cudaEventDisableTiming));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(impl)));
  BLOSSOM_RETURN_IF_ERROR(backend->CalibrateGeluEpilogue());
  return backend;
}

DType CudaBackend::activation_dtype(DType weight_dtype) const {
  if (impl_->options.upcast_weights_to_f32) return DType::kF32;
  return IsFloat(weight_dtype) ? weight_dtype : DType::kF32;
}

void* CudaBackend::stream() const { return impl_->stream; }
bool CudaBackend::gelu_epilogue_in_use() const { return impl_->gelu_epilogue; }
std::string CudaBackend::device_name() const { return impl_->device_name; }

absl::StatusOr<size_t> CudaBackend::FreeDeviceMemory() const {
  size_t free_bytes = 0, total = 0;
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

absl::StatusOr<size_t> CudaBackend::TotalDeviceMemory() const {
  size_t free_bytes = 0, total = 0;
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
  return total;
}

absl::StatusOr<int32_t> CudaBackend::KvBlocksThatFit(size_t bytes_per_block, double fraction) const {
  if (bytes_per_block == 0 || !(fraction > 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: KvBlocksThatFit needs bytes_per_block > 0 and ",
                                                   "a fraction in (0, 1], got ", bytes_per_block, " and ", fraction));
  }
  BLOSSOM_ASSIGN_OR_RETURN(size_t free_bytes, FreeDeviceMemory());
  const double budget = static_cast<double>(free_bytes) * fraction;
  const double blocks = std::floor(budget / static_cast<double>(bytes_per_block));
  if (blocks < 1.0) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: ", fraction, " of the ", free_bytes,
                                                     " free bytes holds no KV block of ", bytes_per_block, " bytes"));
  }
  return static_cast<int32_t>(std::min(blocks, 2147483647.0));
}

// ---- Memory ----

absl::StatusOr<DeviceBuffer> CudaBackend::Allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer(this, nullptr, 0);
  // Any thread may allocate: make sure it targets this backend's device.
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for the next call
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda backend: cannot allocate ", bytes, " bytes of device memory (", cudaGetErrorString(err),
        "); free ", free_bytes, " of ", total, " bytes on ", impl_->device_name));
  }
  return DeviceBuffer(this, p, bytes);
}

void CudaBackend::Free(void* data, size_t) {
  if (data == nullptr) return;
  cudaSetDevice(impl_->options.device);
  cudaFree(data);  // implicitly waits for work using it
}

absl::StatusOr<OwnedTensor> CudaBackend::ImportWeight(const Tensor& host) {
  if (!IsFloat(host.dtype) || (host.data == nullptr && host.numel() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda backend: weights must be f32, f16 or bf16, got ", DTypeName(host.dtype)));
  }
  Impl& im = *impl_;
  const DType dst_dtype =
      im.options.upcast_weights_to_f32 && host.dtype != DType::kF32 ? DType::kF32 : host.dtype;
  Tensor dst = host;
  dst.dtype = dst_dtype;
  dst.device = DeviceKind::kCuda;
  BLOSSOM_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(dst.bytes()));
  dst.data = buffer.data();
  const size_t chunk_bytes = std::max<size_t>(im.options.staging_bytes, 1 << 20) / 16 * 16;
  for (int j = 0; j < 2; ++j) {
    if (im.staging[j] == nullptr) {
      BLOSSOM_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&im.staging[j], chunk_bytes, cudaHostAllocDefault));
    }
  }
  // Double buffering: while the copy engine drains one pinned buffer into the device, the host
  // reads the next part of the (memory-mapped) weight into the other. The buffers carry over
  // between calls, so reading the next weight overlaps the copy of this one.
  const size_t dst_elem = DTypeSize(dst_dtype);
  const int64_t n = host.numel();
  const int64_t chunk_elems = static_cast<int64_t>(chunk_bytes / dst_elem);
  for (int64_t begin = 0; begin < n; begin += chunk_elems) {
    const int64_t count = std::min(chunk_elems, n - begin);
    const int slot = im.next_staging;
    im.next_staging ^= 1;
    BLOSSOM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(im.staging_free[slot]));
    const char* src = static_cast<const char*>(host.data) + begin * DTypeSize(host.dtype);
    if (dst_dtype == host.dtype) {
      std::memcpy(im.staging[slot], src, count * dst_elem);
    } else {
      ConvertToF32(src, host.dtype, static_cast<float*>(im.staging[slot]), count);
    }
    BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(dst.data) + begin * dst_elem,
                                                 im.staging[slot], count * dst_elem,
                                                 cudaMemcpyHostToDevice, im.copy_stream));
    BLOSSOM_CUDA_RETURN_IF_ERROR(cudaEventRecord(im.staging_free[slot], im.copy_stream));
  }
  // Ops on the compute stream that read this weight run after its copy, without a host wait.
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaEventRecord(im.weights_copied, im.copy_stream));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(im.stream, im.weights_copied, 0));
  OwnedTensor owned;
  owned.tensor = dst;
  owned.storage = std::move(buffer);
  return owned;
}

absl::Status CudaBackend::CopyToDevice(const void* host, Tensor dst) {
  if (dst.bytes() == 0) return absl::OkStatus();
  // Pageable host memory: cudaMemcpyAsync returns once the source was staged, so the caller may
  // reuse it at once. (Pinned host memory must stay untouched until the next Synchronize.)
  BLOSSOM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHost(const Tensor& src, void* host) {
  if (src.bytes() > 0) {
    BLOSSOM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, impl_->stream));
  }
  return Synchronize();
}

absl::Status CudaBackend::Synchronize() {
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl_->host_error_flag, impl_->error_flag, sizeof(int),
                                               cudaMemcpyDeviceToHost, impl_->stream));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  return CheckErrorFlag();
}

absl::Status CudaBackend::CheckErrorFlag() {
  const int flag = *impl_->host_error_flag;
  if (flag == 0) return absl::OkStatus();
  *impl_->host_error_flag = 0;
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl_->error_flag, 0, sizeof(int), impl_->stream));
  std::string what;
  if (flag & cuda::kErrorBadSlot) what += " a KV slot_mapping entry outside the KV pool;";
  if (flag & cuda::kErrorBadGatherRow) what += " a GatherRows row index out of range;";
  if (flag & cuda::kErrorBadMetadata)
    what += " attention metadata inconsistent (lengths, block table size or block ids);";
  return absl::InvalidArgumentError(
      absl::StrCat("cuda backend: a kernel met invalid indices (skipped, outputs undefined):", what));
}

absl::StatusOr<std::unique_ptr<KvCache>> CudaBackend::CreateKvCache(const KvCacheSpec& spec) {
  if (spec.num_layers <= 0 || spec.num_blocks <= 0 || spec.block_size <= 0 || spec.num_heads <= 0 ||
      spec.head_dim <= 0) {
    return absl::InvalidArgumentError("cuda backend: KV cache dimensions must be positive");
  }
  if (!IsFloat(spec.dtype)) {
    return absl::InvalidArgumentError("cuda backend: the KV cache dtype must be f32, f16 or bf16");
  }
  if (spec.head_dim > cuda::kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda backend: head_dim ", spec.head_dim, " > ", cuda::kMaxHeadDim, " unsupported"));
  }
  const size_t bytes = spec.BytesPerBlock() * static_cast<size_t>(spec.num_blocks);
  BLOSSOM_ASSIGN_OR_RETURN(DeviceBuffer storage, Allocate(bytes));
  // Zeroed so that never-written slots hold finite values.
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(storage.data(), 0, bytes, impl_->stream));
  return std::unique_ptr<KvCache>(new CudaKvCache(spec, std::move(storage)));
}

// ---- Ops ----

absl::Status CudaBackend::Embedding(const Tensor& table, const Tensor& ids, int64_t vocab_begin, Tensor out) {
  const int64_t n = ids.numel();
  BLOSSOM_RETURN_IF_ERROR(Check(IsFloatTensor(table) && table.rank == 2 && IsFloatTensor(out) &&
                                    ids.dtype == DType::kI32 && out.numel() == n * table.dim(1),
                                "Embedding", "bad shapes or dtypes"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbedding(table.data, Elem(table.dtype), table.dim(0), table.dim(1),
                                                     ids.as<const int32_t>(), n, vocab_begin, out.data,
                                                     Elem(out.dtype), impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                    Tensor residual, Tensor out) {
  const int64_t hidden = x.dim(-1), rows = hidden > 0 ? x.numel() / hidden : 0;
  BLOSSOM_RETURN_IF_ERROR(Check(
      IsFloatTensor(x) && IsFloatTensor(out) && out.numel() == x.numel() && IsFloatTensor(gamma) &&
          IsFloatTensor(beta) && gamma.dtype == beta.dtype && gamma.numel() == hidden &&
          beta.numel() == hidden &&
          (residual.empty() || (residual.dtype == x.dtype && residual.numel() == x.numel())),
      "LayerNorm", "bad shapes or dtypes"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchLayerNorm(x.data, residual.data, Elem(x.dtype), gamma.data, beta.data,
                                                     Elem(gamma.dtype), eps, rows, hidden, out.data,
                                                     Elem(out.dtype), impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::LinearLt(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu,
                                   Tensor out, bool* done) {
  *done = false;
  Impl& im = *impl_;
  const int64_t k = x.dim(-1), m = x.numel() / k, n = weight.dim(0);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (!bias.empty()) epilogue = gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (gelu) epilogue = CUBLASLT_EPILOGUE_GELU;
  GemmKey key{m,
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
  auto it = im.plans.find(key);
  if (it == im.plans.end()) {
    GemmPlan plan;
    // Row-major out[M,N] = x[M,K] w[N,K]^T is column-major out^T[N,M] = op(A) B with A = w
    // seen as a K x N column-major matrix (transposed) and B = x seen as K x M.
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (!bias.empty()) {
      const cudaDataType_t bt = CudaType(bias.dtype);
      BLOSSOM_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.a, CudaType(weight.dtype), k, n, k));
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.b, CudaType(x.dtype), k, m, k));
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.c, CudaType(out.dtype), n, m, n));
    cublasLtMatmulPreference_t pref = nullptr;
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = im.options.gemm_workspace_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a,
                                         sizeof(uint32_t));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b,
                                         sizeof(uint32_t));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c,
                                         sizeof(uint32_t));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c,
                                         sizeof(uint32_t));
    cublasLtMatmulHeuristicResult_t result;
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(im.lt, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                                             pref, 1, &result, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && returned > 0) {
      plan.algo = result.algo;
      plan.has_algo = true;
    }
    it = im.plans.emplace(key, plan).first;  // a miss is cached too: no retry per step
  }
  GemmPlan& plan = it->second;
  if (!plan.has_algo) return absl::OkStatus();
  if (!bias.empty()) {
    const void* bias_ptr = bias.data;
    BLOSSOM_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                  &bias_ptr, sizeof(bias_ptr)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(im.lt, plan.desc, &alpha, weight.data, plan.a, x.data, plan.b, &beta,
                                           out.data, plan.c, out.data, plan.c, &plan.algo, im.gemm_workspace,
                                           im.options.gemm_workspace_bytes, im.stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    // The heuristic's choice refused these operands after all: use the CUDA-core GEMM from now on.
    it->second.has_algo = false;
    return absl::OkStatus();
  }
  BLOSSOM_CUBLAS_RETURN_IF_ERROR(st);
  *done = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation,
                                 Tensor out) {
  const int64_t k = x.dim(-1), n = weight.dim(0);
  const int64_t m = k > 0 ? x.numel() / k : 0;
  BLOSSOM_RETURN_IF_ERROR(Check(IsFloatTensor(x) && IsFloatTensor(weight) && IsFloatTensor(out) &&
                                    x.dtype == weight.dtype && weight.rank == 2 && weight.dim(1) == k &&
                                    out.numel() == m * n && (out.dtype == x.dtype || out.dtype == DType::kF32) &&
                                    (bias.empty() || (IsFloat(bias.dtype) && bias.numel() == n)),
                                "Linear",
                                absl::StrCat("bad shapes or dtypes: x ", x.ShapeString(), " ", DTypeName(x.dtype),
                                             ", weight ", weight.ShapeString(), " ", DTypeName(weight.dtype),
                                             ", out ", out.ShapeString(), " ", DTypeName(out.dtype))));
  if (m == 0 || n == 0) return absl::OkStatus();
  const bool gelu = activation == Activation::kBloomGelu;
  // cuBLASLt applies the bias (and GELU) in its epilogue only when the bias shares the output
  // dtype and the GELU epilogue passed the start-up check; else one fused pass adds them after.
  // The bias must also be 16-byte aligned (cuBLASLt has no alignment preference for it).
  const bool epilogue_ok =
      (bias.empty() || (bias.dtype == out.dtype && AlignmentOf(bias.data) >= 16)) && (!gelu || impl_->gelu_epilogue);
  bool done = false;
  if (k > 0) {
    BLOSSOM_RETURN_IF_ERROR(
        LinearLt(x, weight, epilogue_ok ? bias : Tensor(), epilogue_ok && gelu, out, &done));
  }
  if (!done) {
    BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchFallbackGemm(
        x.data, Elem(x.dtype), weight.data, Elem(weight.dtype), bias.data, Elem(bias.dtype), gelu, m, n, k,
        out.data, Elem(out.dtype), impl_->stream));
    return absl::OkStatus();
  }
  if (!epilogue_ok && (gelu || !bias.empty())) {
    BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchBiasActivation(out.data, Elem(out.dtype), bias.data, Elem(bias.dtype),
                                                            gelu, m, n, impl_->stream));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CalibrateGeluEpilogue() {
  impl_->gelu_epilogue = false;
  if (!impl_->options.allow_gelu_epilogue) return absl::OkStatus();
  // out[0, j] = gelu(w[j, 0] * 1 + 0): the epilogue's GELU sampled on [-6, 6].
  constexpr int64_t kN = 64, kK = 8;
  std::vector<float> x(kK, 0.0f), w(kN * kK, 0.0f), bias(kN, 0.0f), out(kN, 0.0f);
  x[0] = 1.0f;
  for (int64_t j = 0; j < kN; ++j) w[j * kK] = -6.0f + 12.0f * j / (kN - 1);
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor dx, AllocateTensor(DType::kF32, {1, kK}));
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor dw, AllocateTensor(DType::kF32, {kN, kK}));
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor db, AllocateTensor(DType::kF32, {kN}));
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor dout, AllocateTensor(DType::kF32, {1, kN}));
  BLOSSOM_RETURN_IF_ERROR(CopyToDevice(x.data(), dx.tensor));
  BLOSSOM_RETURN_IF_ERROR(CopyToDevice(w.data(), dw.tensor));
  BLOSSOM_RETURN_IF_ERROR(CopyToDevice(bias.data(), db.tensor));
  bool done = false;
  BLOSSOM_RETURN_IF_ERROR(LinearLt(dx.tensor, dw.tensor, db.tensor, /*gelu=*/true, dout.tensor, &done));
  if (!done) return absl::OkStatus();
  BLOSSOM_RETURN_IF_ERROR(CopyToHost(dout.tensor, out.data()));
  for (int64_t j = 0; j < kN; ++j) {
    const float ref = HostBloomGelu(w[j * kK]);
    // An erf GELU or a coarse tanh approximation differs by >1e-4 somewhere on [-6, 6].
    if (!(std::fabs(out[j] - ref) <= 2e-6f * (1.0f + std::fabs(ref)))) return absl::OkStatus();
  }
  impl_->gelu_epilogue = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::AddBiasResidual(Tensor x, const Tensor& bias, const Tensor& residual) {
  const int64_t rows = x.rank > 0 ? x.dim(0) : 0;
  const int64_t cols = rows > 0 ? x.numel() / rows : 0;
  BLOSSOM_RETURN_IF_ERROR(Check(IsFloatTensor(x) && IsFloatTensor(residual) && residual.numel() == x.numel() &&
                                    (bias.empty() || (IsFloat(bias.dtype) && bias.numel() == cols)),
                                "AddBiasResidual", "bad shapes or dtypes"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchAddBiasResidual(x.data, Elem(x.dtype), bias.data, Elem(bias.dtype),
                                                           residual.data, Elem(residual.dtype), rows, cols,
                                                           impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::SplitQkvWriteCache(const Tensor& qkv, const AttentionMetadata& md, int32_t layer,
                                             KvCache& cache, Tensor q) {
  auto& kv = static_cast<CudaKvCache&>(cache);
  const KvCacheSpec& spec = kv.spec();
  const int64_t heads = spec.num_heads, d = spec.head_dim, tokens = md.num_tokens;
  BLOSSOM_RETURN_IF_ERROR(Check(IsFloatTensor(qkv) && qkv.dtype == spec.dtype && q.dtype == spec.dtype &&
                                    q.data != nullptr && qkv.dim(0) == tokens &&
                                    qkv.numel() == tokens * heads * 3 * d && q.numel() == tokens * heads * d &&
                                    layer >= 0 && layer < spec.num_layers &&
                                    md.slot_mapping.dtype == DType::kI32 && md.slot_mapping.numel() >= tokens,
                                "SplitQkvWriteCache",
                                absl::StrCat("bad shapes or dtypes (qkv ", DTypeName(qkv.dtype), ", cache ",
                                             DTypeName(spec.dtype), ")")));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchSplitQkvWriteCache(qkv.data, Elem(qkv.dtype),
                                                              md.slot_mapping.as<const int32_t>(), tokens,
                                                              kv.layout(), layer, q.data, impl_->error_flag,
                                                              impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::Attention(const Tensor& q, const AttentionMetadata& md, int32_t layer,
                                    const KvCache& cache, const Tensor& slopes, float scale, Tensor out) {
  const auto& kv = static_cast<const CudaKvCache&>(cache);
  const KvCacheSpec& spec = kv.spec();
  const int64_t heads = spec.num_heads, d = spec.head_dim;
  BLOSSOM_RETURN_IF_ERROR(Check(
      IsFloatTensor(q) && q.dtype == spec.dtype && out.dtype == spec.dtype && out.data != nullptr &&
          slopes.dtype == DType::kF32 && slopes.numel() == heads &&
          q.numel() == static_cast<int64_t>(md.num_tokens) * heads * d && out.numel() == q.numel() &&
          layer >= 0 && layer < spec.num_layers && md.max_query_len >= 0 && md.num_seqs >= 0,
      "Attention", "bad shapes or dtypes"));
  if (md.num_tokens == 0) return absl::OkStatus();
  cuda::AttentionArgs a;
  a.q = q.data;
  a.out = out.data;
  a.kv = kv.layout();
  a.layer = layer;
  a.query_start = md.query_start.as<const int32_t>();
  a.context_len = md.context_len.as<const int32_t>();
  a.block_tables = md.block_tables.as<const int32_t>();
  a.slopes = slopes.as<const float>();
  a.scale = scale;
  a.num_seqs = md.num_seqs;
  a.num_tokens = md.num_tokens;
  a.max_query_len = md.max_query_len;
  a.max_context_len = md.max_context_len;
  a.max_blocks_per_seq = md.max_blocks_per_seq;
  a.error_flag = impl_->error_flag;
  const size_t ws = cuda::AttentionWorkspaceBytes(a);
  if (ws > impl_->attention_workspace_bytes) {
    if (impl_->attention_workspace != nullptr) {
      BLOSSOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
      cudaFree(impl_->attention_workspace);
      impl_->attention_workspace = nullptr;
      impl_->attention_workspace_bytes = 0;
    }
    const size_t grown = std::max(ws, 2 * impl_->attention_workspace_bytes);
    if (cudaMalloc(&impl_->attention_workspace, grown) != cudaSuccess) {
      cudaGetLastError();
      impl_->attention_workspace = nullptr;
      return absl::ResourceExhaustedError(
          absl::StrCat("cuda backend: cannot allocate ", grown, " bytes of attention workspace"));
    }
    impl_->attention_workspace_bytes = grown;
  }
  BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchAttention(a, impl_->attention_workspace, impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::GatherRows(const Tensor& x, const Tensor& rows, Tensor out) {
  const int64_t n = rows.numel();
  const int64_t x_rows = x.rank > 0 ? x.dim(0) : 0;
  const int64_t cols = x_rows > 0 ? x.numel() / x_rows : 0;
  BLOSSOM_RETURN_IF_ERROR(Check(x.dtype == out.dtype && rows.dtype == DType::kI32 && out.numel() == n * cols,
                                "GatherRows", "bad shapes or dtypes"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchGatherRows(x.data, x_rows, cols * static_cast<int64_t>(DTypeSize(x.dtype)),
                                                      rows.as<const int32_t>(), n, out.data, impl_->error_flag,
                                                      impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::Softmax(const Tensor& x, Tensor out) {
  const int64_t rows = x.rank > 0 ? x.dim(0) : 0;
  const int64_t cols = rows > 0 ? x.numel() / rows : 0;
  BLOSSOM_RETURN_IF_ERROR(Check(IsFloatTensor(x) && out.dtype == DType::kF32 && out.numel() == x.numel() &&
                                    (x.data != out.data || x.dtype == DType::kF32),
                                "Softmax", "bad shapes or dtypes (out must be f32)"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(
      cuda::LaunchSoftmax(x.data, Elem(x.dtype), rows, cols, out.as<float>(), impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::Argmax(const Tensor& x, Tensor out) {
  const int64_t rows = x.rank > 0 ? x.dim(0) : 0;
  const int64_t cols = rows > 0 ? x.numel() / rows : 0;
  BLOSSOM_RETURN_IF_ERROR(Check(IsFloatTensor(x) && out.dtype == DType::kI32 && out.numel() == rows &&
                                    cols <= 0x7fffffff,
                                "Argmax", "bad shapes or dtypes"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(
      cuda::LaunchArgmax(x.data, Elem(x.dtype), rows, cols, out.as<int32_t>(), impl_->stream));
  return absl::OkStatus();
}

}  // namespace blossom
