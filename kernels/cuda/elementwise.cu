// Memory-bound kernels of the CUDA backend: embedding, bias/residual adds, bias+GELU, the fused
// QKV split + paged KV write, row gathers and dtype conversion.
//
// All of them are one pass over their data. Where every operand shares an element type and rows
// are 16-byte aligned, threads move 16 bytes at a time; otherwise a scalar path handles any shape
// (odd hidden sizes, views at odd offsets).
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace blossom {
namespace cuda {
namespace {

constexpr int kThreads = 256;

template <typename TT, typename TO>
__global__ void EmbeddingKernel(const TT* __restrict__ table, int64_t table_rows, int64_t hidden,
                                const int32_t* __restrict__ ids, int64_t vocab_begin,
                                TO* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[t]) - vocab_begin;
  TO* dst = out + t * hidden;
  if (local < 0 || local >= table_rows) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = FromF32<TO>(0.0f);
    return;
  }
  const TT* src = table + local * hidden;  // 64-bit: 176B's table exceeds 2^31 elements
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = FromF32<TO>(ToF32<TT>(src[i]));
}

// Same-type rows of a multiple of 16 bytes: a straight vector copy.
template <typename T>
__global__ void EmbeddingVecKernel(const T* __restrict__ table, int64_t table_rows, int64_t hidden,
                                   const int32_t* __restrict__ ids, int64_t vocab_begin,
                                   T* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[t]) - vocab_begin;
  uint4* dst = reinterpret_cast<uint4*>(out + t * hidden);
  const int64_t n = hidden / Vec<T>::kN;
  if (local < 0 || local >= table_rows) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(table + local * hidden);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = __ldg(src + i);
}

template <typename TX, typename TB, typename TR>
__global__ void AddBiasResidualKernel(TX* __restrict__ x, const TB* __restrict__ bias,
                                      const TR* __restrict__ residual, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = ToF32<TX>(x[i]);
    if (bias != nullptr) v += ToF32<TB>(bias[i % cols]);
    x[i] = FromF32<TX>(v + ToF32<TR>(residual[i]));
  }
}

template <typename T>
__global__ void AddBiasResidualVecKernel(T* __restrict__ x, const T* __restrict__ bias,
                                         const T* __restrict__ residual, int64_t rows,
                                         int64_t cols) {
  constexpr int kN = Vec<T>::kN;
  const int64_t n = rows * cols / kN;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float a[kN], r[kN], b[kN];
    Load16Coherent(x + i * kN, a);  // x is written by this kernel
    Load16(residual + i * kN, r);
    if (bias != nullptr) {
      Load16(bias + (i * kN) % cols, b);
#pragma unroll
      for (int j = 0; j < kN; ++j) a[j] += b[j];
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) a[j] += r[j];
    Store16(x + i * kN, a);
  }
}

template <typename TX, typename TB>
__global__ void BiasActivationKernel(TX* __restrict__ x, const TB* __restrict__ bias, bool gelu,
                                     int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = ToF32<TX>(x[i]);
    if (bias != nullptr) v += ToF32<TB>(bias[i % cols]);
    x[i] = FromF32<TX>(gelu ? BloomGelu(v) : v);
  }
}

// One block per token; thread i handles element i of the fused row, so reads of qkv are
// coalesced and each head's q/k/v row is written contiguously. For rows that are not whole
// 16-byte vectors (odd head sizes, misaligned views); SplitQkvVecKernel serves the rest.
template <typename T>
__global__ void SplitQkvKernel(const T* __restrict__ qkv, const int32_t* __restrict__ slots,
                               KvLayout kv, int32_t layer, T* __restrict__ q, int* error_flag) {
  const int64_t t = blockIdx.x;
  const int32_t heads = kv.num_heads, d = kv.head_dim;
  const int64_t row = static_cast<int64_t>(heads) * 3 * d;
  const int32_t slot = slots[t];
  const int64_t num_slots = kv.num_blocks * kv.block_size;
  const bool slot_ok = slot >= 0 && slot < num_slots;
  // kPaddingSlot (-1): a padding row of a captured step; its q is written, its K/V nowhere.
  if (!slot_ok && slot != -1 && threadIdx.x == 0) atomicOr(error_flag, kErrorBadSlot);
  const int64_t block = slot_ok ? slot / kv.block_size : 0;
  const int32_t offset = slot_ok ? slot % kv.block_size : 0;
  T* k_base = static_cast<T*>(kv.base) + layer * kv.LayerStride();
  T* v_base = k_base + kv.TensorElems();
  const T* src = qkv + t * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    const int32_t h = static_cast<int32_t>(i / (3 * d));
    const int32_t j = static_cast<int32_t>((i / d) % 3);
    const int32_t e = static_cast<int32_t>(i % d);
    const T v = src[i];
    if (j == 0) {
      q[(t * heads + h) * d + e] = v;
    } else if (slot_ok) {
      const int64_t at = ((block * heads + h) * kv.block_size + offset) * d + e;
      (j == 1 ? k_base : v_base)[at] = v;
    }
  }
}

// The same split with 16-byte vectors, for head rows of whole vectors (head_dim % Vec<T>::kN == 0)
// and aligned tensors: grid (token, vector blocks), one vector per thread, 32-bit index math. A
// vector never straddles a head's q, k or v row, so each moves as one load and one store.
template <typename T>
__global__ void SplitQkvVecKernel(const T* __restrict__ qkv, const int32_t* __restrict__ slots, KvLayout kv,
                                  int32_t layer, T* __restrict__ q, int* error_flag) {
  constexpr int kN = Vec<T>::kN;
  PdlEnter();
  const int64_t t = blockIdx.x;
  const int32_t heads = kv.num_heads, d = kv.head_dim;
  const int32_t dv = d / kN;  // vectors per head row
  const int32_t row_vecs = heads * 3 * dv;
  const int32_t i = static_cast<int32_t>(blockIdx.y * blockDim.x + threadIdx.x);
  const int32_t slot = slots[t];
  const int64_t num_slots = kv.num_blocks * kv.block_size;
  const bool slot_ok = slot >= 0 && slot < num_slots;
  // kPaddingSlot (-1): a padding row of a captured step; its q is written, its K/V nowhere.
  if (!slot_ok && slot != -1 && i == 0) atomicOr(error_flag, kErrorBadSlot);
  if (i >= row_vecs) return;
  const int32_t h = i / (3 * dv), rem = i - h * 3 * dv, j = rem / dv, ev = rem - j * dv;
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(qkv + t * heads * 3 * d) + i);
  if (j == 0) {
    *reinterpret_cast<uint4*>(q + (t * heads + h) * d + ev * kN) = v;
  } else if (slot_ok) {
    T* base = static_cast<T*>(kv.base) + layer * kv.LayerStride() + (j == 2 ? kv.TensorElems() : 0);
    const int64_t block = slot / kv.block_size, offset = slot % kv.block_size;
    *reinterpret_cast<uint4*>(base + ((block * heads + h) * kv.block_size + offset) * d + ev * kN) = v;
  }
}

__global__ void GatherRowsKernel(const char* __restrict__ x, int64_t x_rows, int64_t row_bytes,
                                 const int32_t* __restrict__ rows, char* __restrict__ out,
                                 int* error_flag, bool vec) {
  const int64_t r = blockIdx.x;
  const int32_t src = rows[r];
  char* dst = out + r * row_bytes;
  if (src < 0 || src >= x_rows) {
    if (threadIdx.x == 0) atomicOr(error_flag, kErrorBadGatherRow);
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = 0;
    return;
  }
  const char* s = x + src * row_bytes;
  if (vec) {
    for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = __ldg(reinterpret_cast<const uint4*>(s) + i);
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = s[i];
  }
}

template <typename TS, typename TD>
__global__ void ConvertKernel(const TS* __restrict__ src, TD* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = FromF32<TD>(ToF32<TS>(src[i]));
}

unsigned GridFor(int64_t n) {
  // Enough blocks to fill an H100 several times over; grid-stride loops cover the rest.
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 16)));
}

}  // namespace

cudaError_t LaunchEmbedding(const void* table, ElemType table_type, int64_t table_rows,
                            int64_t hidden, const int32_t* ids, int64_t num_tokens,
                            int64_t vocab_begin, void* out, ElemType out_type,
                            cudaStream_t stream) {
  if (num_tokens == 0 || hidden == 0) return cudaSuccess;
  const bool vec = table_type == out_type && (hidden * ElemSize(out_type)) % 16 == 0 &&
                   Aligned16(table) && Aligned16(out);
  if (vec) {
    BLOSSOM_DISPATCH_ELEM(out_type, T,
                          EmbeddingVecKernel<T><<<num_tokens, 128, 0, stream>>>(
                              static_cast<const T*>(table), table_rows, hidden, ids, vocab_begin,
                              static_cast<T*>(out)));
  } else {
    BLOSSOM_DISPATCH_ELEM(table_type, TT,
        BLOSSOM_DISPATCH_ELEM(out_type, TO,
                              EmbeddingKernel<TT, TO><<<num_tokens, kThreads, 0, stream>>>(
                                  static_cast<const TT*>(table), table_rows, hidden, ids,
                                  vocab_begin, static_cast<TO*>(out))));
  }
  return cudaGetLastError();
}

cudaError_t LaunchAddBiasResidual(void* x, ElemType x_type, const void* bias, ElemType bias_type,
                                  const void* residual, ElemType residual_type, int64_t rows,
                                  int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  const bool same = residual_type == x_type && (bias == nullptr || bias_type == x_type);
  const int64_t kn = 16 / ElemSize(x_type);
  if (same && cols % kn == 0 && Aligned16(x) && Aligned16(residual) &&
      (bias == nullptr || Aligned16(bias))) {
    BLOSSOM_DISPATCH_ELEM(x_type, T,
                          AddBiasResidualVecKernel<T><<<GridFor(n / kn), kThreads, 0, stream>>>(
                              static_cast<T*>(x), static_cast<const T*>(bias),
                              static_cast<const T*>(residual), rows, cols));
  } else {
    BLOSSOM_DISPATCH_ELEM(x_type, TX,
        BLOSSOM_DISPATCH_ELEM(bias_type, TB,
            BLOSSOM_DISPATCH_ELEM(residual_type, TR,
                AddBiasResidualKernel<TX, TB, TR><<<GridFor(n), kThreads, 0, stream>>>(
                    static_cast<TX*>(x), static_cast<const TB*>(bias),
                    static_cast<const TR*>(residual), rows, cols))));
  }
  return cudaGetLastError();
}

cudaError_t LaunchBiasActivation(void* x, ElemType x_type, const void* bias, ElemType bias_type,
                                 bool gelu, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  BLOSSOM_DISPATCH_ELEM(x_type, TX,
      BLOSSOM_DISPATCH_ELEM(bias_type, TB,
          BiasActivationKernel<TX, TB><<<GridFor(n), kThreads, 0, stream>>>(
              static_cast<TX*>(x), static_cast<const TB*>(bias), gelu, rows, cols)));
  return cudaGetLastError();
}

cudaError_t LaunchSplitQkvWriteCache(const void* qkv, ElemType act_type, const int32_t* slot_mapping,
                                     int64_t num_tokens, const KvLayout& kv, int32_t layer, void* q,
                                     int* error_flag, cudaStream_t stream, bool pdl) {
  if (num_tokens == 0) return cudaSuccess;
  const int64_t row = static_cast<int64_t>(kv.num_heads) * 3 * kv.head_dim;
  const int64_t per_vec = 16 / static_cast<int64_t>(ElemSize(act_type));
  if (kv.head_dim % per_vec == 0 && Aligned16(qkv) && Aligned16(q) && Aligned16(kv.base) &&
      num_tokens <= 0x7fffffff) {
    const int64_t row_vecs = row / per_vec;
    const dim3 grid(static_cast<unsigned>(num_tokens), CeilDiv(row_vecs, kThreads));
    BLOSSOM_DISPATCH_ELEM(act_type, T,
                          return LaunchKernel(pdl, &SplitQkvVecKernel<T>, grid, dim3(kThreads), 0, stream,
                                              static_cast<const T*>(qkv), slot_mapping, kv, layer,
                                              static_cast<T*>(q), error_flag));
  }
  const int threads = static_cast<int>(std::min<int64_t>(512, (row + 31) / 32 * 32));
  BLOSSOM_DISPATCH_ELEM(act_type, T,
                        SplitQkvKernel<T><<<num_tokens, threads, 0, stream>>>(
                            static_cast<const T*>(qkv), slot_mapping, kv, layer,
                            static_cast<T*>(q), error_flag));
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const void* x, int64_t x_rows, int64_t row_bytes, const int32_t* rows,
                             int64_t num_rows, void* out, int* error_flag, cudaStream_t stream) {
  if (num_rows == 0 || row_bytes == 0) return cudaSuccess;
  const bool vec = row_bytes % 16 == 0 && Aligned16(x) && Aligned16(out);
  GatherRowsKernel<<<num_rows, kThreads, 0, stream>>>(static_cast<const char*>(x), x_rows,
                                                      row_bytes, rows, static_cast<char*>(out),
                                                      error_flag, vec);
  return cudaGetLastError();
}

cudaError_t LaunchConvert(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                          int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  BLOSSOM_DISPATCH_ELEM(src_type, TS,
      BLOSSOM_DISPATCH_ELEM(dst_type, TD,
          ConvertKernel<TS, TD><<<GridFor(n), kThreads, 0, stream>>>(
              static_cast<const TS*>(src), static_cast<TD*>(dst), n)));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace blossom
