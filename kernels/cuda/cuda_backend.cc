#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/lt_gemm.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

using cuda::ElemType;

static_assert(static_cast<int>(DType::kF32) == static_cast<int>(ElemType::kF32), "dtype values");
static_assert(static_cast<int>(DType::kF16) == static_cast<int>(ElemType::kF16), "dtype values");
static_assert(static_cast<int>(DType::kBF16) == static_cast<int>(ElemType::kBF16), "dtype values");

#define BLOSSOM_CUDA_RETURN_IF_ERROR(expr)                           \
  do {                                                               \
    const cudaError_t blossom_cuda_err_ = (expr);                    \
    if (blossom_cuda_err_ != cudaSuccess) return CudaError(#expr, blossom_cuda_err_); \
  } while (0)

absl::Status Check(bool ok, absl::string_view op, absl::string_view what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cuda backend: ", op, ": ", what));
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

}  // namespace

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Options& options) {
  // Checked before any device call, so a bad option is named the same with or without a GPU.
  if (!cuda::DecodeThreadsSupported(options.decode_attention_threads)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: decode_attention_threads is ",
                                                   options.decode_attention_threads, "; it must be 128, 256 or 512"));
  }
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
  if (options.gemm_workspace_bytes > 0) {
    BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->gemm_workspace, options.gemm_workspace_bytes));
  }
  BLOSSOM_ASSIGN_OR_RETURN(impl->gemm,
                           LtGemm::Create(impl->gemm_workspace, options.gemm_workspace_bytes, impl->stream));
  impl->gemm->set_time_candidates(options.time_gemm_candidates);
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
bool CudaBackend::gelu_epilogue_in_use(DType dtype) const {
  return IsFloat(dtype) && impl_->gelu_epilogue[GeluSlot(dtype)];
}
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
  BLOSSOM_RETURN_IF_ERROR(RefuseWhileCapturing("Allocate"));
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
  BLOSSOM_RETURN_IF_ERROR(RefuseWhileCapturing("ImportWeight"));
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

absl::StatusOr<HostBuffer> CudaBackend::AllocateHostStaging(size_t bytes) {
  BLOSSOM_RETURN_IF_ERROR(RefuseWhileCapturing("AllocateHostStaging"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 64), cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: cannot allocate ", bytes,
                                                     " bytes of pinned host memory (",
                                                     cudaGetErrorString(err), ")"));
  }
  return HostBuffer(p, [](void* q) { cudaFreeHost(q); });
}

absl::Status CudaBackend::CopyToDevice(const void* host, Tensor dst) {
  BLOSSOM_RETURN_IF_ERROR(RefuseWhileCapturing("CopyToDevice"));
  if (dst.bytes() == 0) return absl::OkStatus();
  // Pageable host memory: cudaMemcpyAsync returns once the source was staged, so the caller may
  // reuse it at once. (Pinned host memory must stay untouched until the next Synchronize.)
  BLOSSOM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHost(const Tensor& src, void* host) {
  BLOSSOM_RETURN_IF_ERROR(RefuseWhileCapturing("CopyToHost"));
  if (src.bytes() > 0) {
    BLOSSOM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, impl_->stream));
  }
  return Synchronize();
}

absl::Status CudaBackend::CopyColumns(const Tensor& src, Tensor dst, int64_t col_begin) {
  BLOSSOM_RETURN_IF_ERROR(CheckCopyColumns(src, dst, col_begin));
  const size_t width = DTypeBytes(src.dtype, src.dim(1)), pitch = DTypeBytes(dst.dtype, dst.dim(1));
  if (width == 0 || src.dim(0) == 0) return absl::OkStatus();
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
      static_cast<char*>(dst.data) + DTypeBytes(dst.dtype, col_begin), pitch, src.data, width,
      width, static_cast<size_t>(src.dim(0)), cudaMemcpyDeviceToDevice, impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::Health() {
  const cudaError_t err = cudaStreamQuery(impl_->stream);
  if (err == cudaSuccess || err == cudaErrorNotReady) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA device unusable: ", cudaGetErrorName(err), ": ",
                                          cudaGetErrorString(err)));
}

absl::Status CudaBackend::Synchronize() {
  BLOSSOM_RETURN_IF_ERROR(RefuseWhileCapturing("Synchronize"));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl_->host_error_flag, impl_->error_flag, sizeof(int),
                                               cudaMemcpyDeviceToHost, impl_->stream));
  BLOSSOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  impl_->retired_workspaces.clear();  // the stream no longer uses them (graphs may: they hold them)
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
                                                     Elem(out.dtype), impl_->stream,
                                                     impl_->options.register_layernorm,
                                                     impl_->options.programmatic_launch));
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
                                                              impl_->stream, impl_->options.programmatic_launch));
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
  a.allow_tensor_cores = impl_->options.tensor_core_attention;
  a.mma_prefill = impl_->options.mma_prefill_attention;
  a.decode_threads = impl_->options.decode_attention_threads;
  a.pdl = impl_->options.programmatic_launch;
  const size_t ws = cuda::AttentionWorkspaceBytes(a);
  if (ws > impl_->attention_workspace_bytes) {
    if (impl_->capturing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Attention inside a step capture needs ", ws, " bytes of workspace, ",
          impl_->attention_workspace_bytes, " allocated: run the step once uncaptured first"));
    }
    // Grow geometrically (computed before the old size is reset), so a run of slightly longer
    // steps does not reallocate every time.
    const size_t grown = std::max(ws, 2 * impl_->attention_workspace_bytes);
    if (impl_->attention_workspace != nullptr) {
      // Retired, not freed: cudaFree (or a stream wait) here would wait in the middle of a step
      // for the stream, which may hold a collective of an asynchronous NCCL communicator that a
      // dead peer never joins; only the communicator's Fence() bounds that wait.
      impl_->retired_workspaces.push_back(std::move(impl_->attention_workspace));
      impl_->attention_workspace_bytes = 0;
    }
    void* fresh = nullptr;
    size_t allocated = grown;
    if (cudaMalloc(&fresh, grown) != cudaSuccess) {
      // Doubling is only amortisation: what the step needs may still fit.
      cudaGetLastError();
      allocated = ws;
      if (grown == ws || cudaMalloc(&fresh, ws) != cudaSuccess) {
        cudaGetLastError();
        return absl::ResourceExhaustedError(
            absl::StrCat("cuda backend: cannot allocate ", ws, " bytes of attention workspace"));
      }
    }
    const int device = impl_->options.device;
    impl_->attention_workspace = std::shared_ptr<void>(fresh, [device](void* p) {
      cudaSetDevice(device);
      cudaFree(p);
    });
    impl_->attention_workspace_bytes = allocated;
  }
  BLOSSOM_CUDA_RETURN_IF_ERROR(cuda::LaunchAttention(a, impl_->attention_workspace.get(), impl_->stream));
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
