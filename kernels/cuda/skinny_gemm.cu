// Skinny GEMM for decode-sized steps: out[M, N] = act(x[M, K] w[N, K]^T + bias[N]) for M <= 8.
//
// Why: at decode, M is the batch (1 to a few rows) and the step's time is reading the weights
// once. On an H200, BLOOM-7b1 decode steps with cuBLASLt ran at 53% of the weight-read floor at
// batch 1 (benchmarks/results/2026-11-26-gpu-h200); a GEMM tiled for large M spends its time on
// tile set-up and split-K reductions there. This kernel is a batched GEMV: it streams each weight
// row once with 16-byte loads, several in flight per lane, and multiplies it with all M rows of x.
//
// Work split: a warp owns kColsPerWarp consecutive output columns (weight rows); its lanes stride
// over K in 16-byte vectors, kUnroll vectors per column in flight before any arithmetic. Each
// lane keeps fp32 partial sums for every (column, x row); a warp reduction (WarpSum) ends each
// sum, and lane 0 adds the bias, applies BLOOM's gelu and rounds once to the output dtype.
// x (M rows) is read through the read-only cache, where every warp of the block finds it; the
// weights are loaded with the streaming hint (evict first: each byte is
// read once per step).
//
// Split-K variant (kSplitK = kWarps): the block's warps share kColsPerWarp columns and split K
// between them (warp w takes every kWarps-th 32-vector stride), their partial sums meeting in
// shared memory. A block then covers 4x fewer columns, so a step has 4x the warps in flight:
// for the shapes whose columns are too few to fill the GPU with whole-K warps (N = 4096 with
// K = 4096 or 16384, BLOOM-7b1's dense and fc2: 1,024 warps on 132 SMs, which read at ~3 TB/s
// on an H200 where the LM head reads at 4.5).
//
// Numerics: products and sums in fp32 (the sum order is lane-strided, then a butterfly, then for
// split K the warps in order), the same contract as cuBLASLt's CUBLAS_COMPUTE_32F; bias and
// gelu in fp32 before the one rounding.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace blossom {
namespace cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kColsPerWarp = 4;
constexpr int kUnroll = 2;  // 16-byte weight vectors per column per lane in flight

__device__ __forceinline__ float LoadAsF32(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case ElemType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void StoreFromF32(void* p, ElemType t, int64_t i, float v) {
  switch (t) {
    case ElemType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case ElemType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = FromF32<__nv_bfloat16>(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

template <typename T>
__device__ __forceinline__ void Unpack(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec<T>::kN; ++i) out[i] = ToF32<T>(e[i]);
}

// kRows: the compile-time upper bound of M (1, 2, 4 or 8); `m` <= kRows is the call's rows.
// kSplitK: 1 (each warp owns its columns and all of K) or kWarps (see the file comment).
template <typename T, int kRows, int kSplitK>
__global__ void __launch_bounds__(kWarps * 32)
    SkinnyGemmKernel(const T* __restrict__ x, const T* __restrict__ w, const void* __restrict__ bias,
                     ElemType bias_type, bool gelu, int m, int64_t n, int64_t k, void* __restrict__ out,
                     ElemType out_type) {
  static_assert(kSplitK == 1 || kSplitK == kWarps, "split K over all of a block's warps or none");
  PdlEnter();
  constexpr int kN = Vec<T>::kN;
  constexpr int kStride = 32 * kSplitK;  // vectors between a lane's consecutive loads of a column
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col0 = kSplitK == 1
                           ? (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kColsPerWarp
                           : static_cast<int64_t>(blockIdx.x) * kColsPerWarp;
  // Whole warp (and with split K, whole block): no shuffle or barrier below is left half-joined.
  if (col0 >= n) return;
  const int64_t vecs = k / kN;
  const int64_t first = kSplitK == 1 ? lane : warp * 32 + lane;
  // Columns past n re-read the last one (in bounds, never stored): the loop stays branch-free.
  const uint4* wrow[kColsPerWarp];
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) {
    wrow[c] = reinterpret_cast<const uint4*>(w + min(col0 + c, n - 1) * k);
  }
  const uint4* xrow = reinterpret_cast<const uint4*>(x);

  float acc[kColsPerWarp][kRows];
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[c][r] = 0.0f;

  for (int64_t v0 = first; v0 < vecs; v0 += kStride * kUnroll) {
    uint4 wv[kColsPerWarp][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + kStride * u;
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) wv[c][u] = v < vecs ? __ldcs(wrow[c] + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + kStride * u;
      if (v >= vecs) break;
      float wf[kColsPerWarp][kN];
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) Unpack<T>(wv[c][u], wf[c]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= m) break;
        float xf[kN];
        Unpack<T>(__ldg(xrow + r * vecs + v), xf);
#pragma unroll
        for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
          for (int i = 0; i < kN; ++i) acc[c][r] = fmaf(xf[i], wf[c][i], acc[c][r]);
      }
    }
  }

#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[c][r] = WarpSum(acc[c][r]);
  if (kSplitK > 1) {
    __shared__ float partial[kWarps][kColsPerWarp][kRows];
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
        for (int r = 0; r < kRows; ++r) partial[warp][c][r] = acc[c][r];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float sum = partial[0][c][r];
        for (int ww = 1; ww < kWarps; ++ww) sum += partial[ww][c][r];
        acc[c][r] = sum;
      }
  }
  if (lane != 0) return;
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) {
    const int64_t col = col0 + c;
    if (col >= n) break;
    const float b = bias != nullptr ? LoadAsF32(bias, bias_type, col) : 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= m) break;
      const float v = acc[c][r] + b;
      StoreFromF32(out, out_type, r * n + col, gelu ? BloomGelu(v) : v);
    }
  }
}

template <typename T, int kSplitK>
cudaError_t LaunchRows(const void* x, const void* w, const void* bias, ElemType bias_type, bool gelu, int64_t m,
                       int64_t n, int64_t k, void* out, ElemType out_type, bool pdl, cudaStream_t stream) {
  const int64_t cols_per_block = (kSplitK == 1 ? kWarps : 1) * kColsPerWarp;
  const dim3 grid(CeilDiv(n, cols_per_block)), block(kWarps * 32);
  auto kernel = m <= 1   ? &SkinnyGemmKernel<T, 1, kSplitK>
                : m <= 2 ? &SkinnyGemmKernel<T, 2, kSplitK>
                : m <= 4 ? &SkinnyGemmKernel<T, 4, kSplitK>
                         : &SkinnyGemmKernel<T, 8, kSplitK>;
  return LaunchKernel(pdl, kernel, grid, block, 0, stream, static_cast<const T*>(x), static_cast<const T*>(w), bias,
                      bias_type, gelu, static_cast<int>(m), n, k, out, out_type);
}

template <typename T>
cudaError_t LaunchFor(const void* x, const void* w, const void* bias, ElemType bias_type, bool gelu, int64_t m,
                      int64_t n, int64_t k, void* out, ElemType out_type, SkinnyGemmVariant variant, bool pdl,
                      cudaStream_t stream) {
  if (variant == SkinnyGemmVariant::kSplitK) {
    return LaunchRows<T, kWarps>(x, w, bias, bias_type, gelu, m, n, k, out, out_type, pdl, stream);
  }
  return LaunchRows<T, 1>(x, w, bias, bias_type, gelu, m, n, k, out, out_type, pdl, stream);
}

}  // namespace

bool SkinnyGemmSupports(const void* x, const void* w, ElemType type, int64_t m, int64_t n, int64_t k) {
  const int64_t per_vec = 16 / static_cast<int64_t>(ElemSize(type));
  return m >= 1 && m <= kSkinnyGemmMaxRows && n >= 1 && k >= per_vec && k % per_vec == 0 && Aligned16(x) &&
         Aligned16(w);
}

cudaError_t LaunchSkinnyGemm(const void* x, const void* w, ElemType type, const void* bias, ElemType bias_type,
                             bool gelu, int64_t m, int64_t n, int64_t k, void* out, ElemType out_type,
                             cudaStream_t stream, SkinnyGemmVariant variant, bool pdl) {
  if (!SkinnyGemmSupports(x, w, type, m, n, k)) return cudaErrorInvalidValue;
  BLOSSOM_DISPATCH_ELEM(type, T,
                        return LaunchFor<T>(x, w, bias, bias_type, gelu, m, n, k, out, out_type, variant, pdl,
                                            stream));
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace blossom
