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
// weights are loaded with the streaming hint (evict first: each byte is read once per step), the
// first kUnroll vectors per column before PdlEnter (no kernel of a step writes the weights, so
// with programmatic launch they stream while the kernel before is still finishing).
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
//
// Tensor-core variant (SkinnyGemmVariant::kMma, f16/bf16, M <= 16): the CUDA-core kernels lose
// to cuBLASLt from M = 2 on (on an H200, QKV at M = 8: 77 us against cuBLASLt's 30), because
// their fp32 FMAs and x re-reads grow with M while the bytes do not. Here a block's 16 output
// columns are the A operand of mma.sync.m16n8k16 (16 weight rows) and x's rows the B operand (8
// per n-tile), so M costs nothing until 16. The weights come straight from global memory into
// the A fragments, with no shared memory: the product sums over k, so k may be permuted as long
// as A and B use the same permutation, and lane (g, t) takes the 8 consecutive elements
// [32c + 8t, 32c + 8t + 8) of weight rows g and g + 8 as one 16-byte load each (a warp reads 64
// contiguous bytes of 16 rows per instruction), using elements 0-3 as its k-slots (2t, 2t+1,
// 2t+8, 2t+9) of one k-step and 4-7 of the next; its B fragment is the same 8 elements of x row
// g. The block's 8 warps split K into contiguous ranges of 32-element chunks, kMmaUnroll chunks
// of loads in flight per lane, and meet in shared memory. The first chunks' weight loads are
// issued before PdlEnter: the weights are never written by a step, so with programmatic launch
// they stream while the kernel before is still finishing. Products are exact and summed in fp32
// by the tensor cores (as cuBLASLt's), then across k-steps and warps in order.
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
  constexpr int kN = Vec<T>::kN;
  constexpr int kStride = 32 * kSplitK;  // vectors between a lane's consecutive loads of a column
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col0 = kSplitK == 1
                           ? (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kColsPerWarp
                           : static_cast<int64_t>(blockIdx.x) * kColsPerWarp;
  const int64_t vecs = k / kN;
  const int64_t first = kSplitK == 1 ? lane : warp * 32 + lane;
  // Columns past n re-read the last one (in bounds, never stored): the loop stays branch-free.
  const uint4* wrow[kColsPerWarp];
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) {
    wrow[c] = reinterpret_cast<const uint4*>(w + min(col0 + c, n - 1) * k);
  }
  const uint4* xrow = reinterpret_cast<const uint4*>(x);
  uint4 wv[kColsPerWarp][kUnroll];
  auto load_weights = [&](int64_t v0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + kStride * u;
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) wv[c][u] = v < vecs ? __ldcs(wrow[c] + v) : make_uint4(0, 0, 0, 0);
    }
  };
  // Whole warp (and with split K, whole block): no shuffle or barrier below is left half-joined.
  const bool active = col0 < n;
  // The first weights before PdlEnter: no kernel of a step writes them, so with programmatic
  // launch they stream while the kernel before (which writes x) is still finishing.
  if (active) load_weights(first);
  PdlEnter();
  if (!active) return;

  float acc[kColsPerWarp][kRows];
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[c][r] = 0.0f;

  for (int64_t v0 = first; v0 < vecs; v0 += kStride * kUnroll) {
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
    if (v0 + kStride * kUnroll < vecs) load_weights(v0 + kStride * kUnroll);
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

// ---- Tensor-core variant (see the file comment) ----

constexpr int kMmaWarps = 8;
constexpr int kMmaCols = 16;     // output columns per block: the 16 rows of one A tile
constexpr int kMmaChunk = 32;    // k elements per chunk: a quad's 4 lanes x one 16-byte vector
constexpr int kMmaUnroll = 4;    // chunks of weight loads in flight per lane

// The A fragment of k-step `step` (0: elements 0-3 of the vectors, 1: elements 4-7) from lane
// (g, t)'s vectors of weight rows g (lo) and g + 8 (hi).
__device__ __forceinline__ void MmaA(const uint4& lo, const uint4& hi, int step, uint32_t (&a)[4]) {
  a[0] = step == 0 ? lo.x : lo.z;
  a[1] = step == 0 ? hi.x : hi.z;
  a[2] = step == 0 ? lo.y : lo.w;
  a[3] = step == 0 ? hi.y : hi.w;
}

// kTiles: n-tiles of 8 x rows (1: M <= 8, 2: M <= 16).
template <typename T, int kTiles>
__global__ void __launch_bounds__(kMmaWarps * 32)
    SkinnyMmaKernel(const T* __restrict__ x, const T* __restrict__ w, const void* __restrict__ bias,
                    ElemType bias_type, bool gelu, int m, int64_t n, int64_t k, void* __restrict__ out,
                    ElemType out_type) {
  constexpr int kN = Vec<T>::kN;  // 8
  static_assert(kMmaChunk == 4 * kN, "a chunk is one 16-byte vector for each of a quad's 4 lanes");
  __shared__ float partial[kMmaWarps][kMmaCols][kTiles * 8 + 1];  // +1: no bank conflicts below
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kMmaCols;
  // Rows past n re-read the last one (in bounds, never stored).
  const T* w_lo = w + min(col0 + g, n - 1) * k;
  const T* w_hi = w + min(col0 + g + 8, n - 1) * k;
  const int64_t chunks = (k + kMmaChunk - 1) / kMmaChunk;
  const int64_t c_begin = chunks * warp / kMmaWarps, c_end = chunks * (warp + 1) / kMmaWarps;

  uint4 a_lo[kMmaUnroll], a_hi[kMmaUnroll];
  auto load_weights = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int64_t off = (c0 + u) * kMmaChunk + t * kN;
      const bool ok = c0 + u < c_end && off < k;  // k is a whole number of vectors
      a_lo[u] = ok ? __ldcs(reinterpret_cast<const uint4*>(w_lo + off)) : make_uint4(0, 0, 0, 0);
      a_hi[u] = ok ? __ldcs(reinterpret_cast<const uint4*>(w_hi + off)) : make_uint4(0, 0, 0, 0);
    }
  };
  load_weights(c_begin);  // before PdlEnter: no kernel of a step writes the weights
  PdlEnter();

  float acc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  for (int64_t c0 = c_begin; c0 < c_end; c0 += kMmaUnroll) {
    uint4 b[kTiles][kMmaUnroll];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int row = i * 8 + g;
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u) {
        const int64_t off = (c0 + u) * kMmaChunk + t * kN;
        const bool ok = row < m && c0 + u < c_end && off < k;
        b[i][u] = ok ? __ldg(reinterpret_cast<const uint4*>(x + row * k + off)) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        uint32_t a[4];
        MmaA(a_lo[u], a_hi[u], step, a);
#pragma unroll
        for (int i = 0; i < kTiles; ++i) {
          Mma16816<T>(acc[i], a, step == 0 ? b[i][u].x : b[i][u].z, step == 0 ? b[i][u].y : b[i][u].w);
        }
      }
    }
    if (c0 + kMmaUnroll < c_end) load_weights(c0 + kMmaUnroll);
  }

  // acc[i]: (column g, x row 8i + 2t), (g, 8i + 2t + 1), (g + 8, 8i + 2t), (g + 8, 8i + 2t + 1).
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    partial[warp][g][i * 8 + 2 * t] = acc[i][0];
    partial[warp][g][i * 8 + 2 * t + 1] = acc[i][1];
    partial[warp][g + 8][i * 8 + 2 * t] = acc[i][2];
    partial[warp][g + 8][i * 8 + 2 * t + 1] = acc[i][3];
  }
  __syncthreads();
  // One thread per (x row, column), consecutive threads on consecutive columns of a row.
  for (int i = threadIdx.x; i < kTiles * 8 * kMmaCols; i += blockDim.x) {
    const int r = i / kMmaCols, c = i % kMmaCols;
    const int64_t col = col0 + c;
    if (r >= m || col >= n) continue;
    float sum = partial[0][c][r];
#pragma unroll
    for (int ww = 1; ww < kMmaWarps; ++ww) sum += partial[ww][c][r];
    if (bias != nullptr) sum += LoadAsF32(bias, bias_type, col);
    StoreFromF32(out, out_type, r * n + col, gelu ? BloomGelu(sum) : sum);
  }
}

template <typename T>
cudaError_t LaunchMma(const void* x, const void* w, const void* bias, ElemType bias_type, bool gelu, int64_t m,
                      int64_t n, int64_t k, void* out, ElemType out_type, bool pdl, cudaStream_t stream) {
  const dim3 grid(CeilDiv(n, kMmaCols)), block(kMmaWarps * 32);
  auto kernel = m <= 8 ? &SkinnyMmaKernel<T, 1> : &SkinnyMmaKernel<T, 2>;
  return LaunchKernel(pdl, kernel, grid, block, 0, stream, static_cast<const T*>(x), static_cast<const T*>(w), bias,
                      bias_type, gelu, static_cast<int>(m), n, k, out, out_type);
}

}  // namespace

bool SkinnyGemmSupports(const void* x, const void* w, ElemType type, int64_t m, int64_t n, int64_t k,
                        SkinnyGemmVariant variant) {
  const int64_t per_vec = 16 / static_cast<int64_t>(ElemSize(type));
  const bool mma = variant == SkinnyGemmVariant::kMma;
  if (mma && type != ElemType::kF16 && type != ElemType::kBF16) return false;
  return m >= 1 && m <= (mma ? kSkinnyMmaMaxRows : kSkinnyGemmMaxRows) && n >= 1 && k >= per_vec &&
         k % per_vec == 0 && Aligned16(x) && Aligned16(w);
}

cudaError_t LaunchSkinnyGemm(const void* x, const void* w, ElemType type, const void* bias, ElemType bias_type,
                             bool gelu, int64_t m, int64_t n, int64_t k, void* out, ElemType out_type,
                             cudaStream_t stream, SkinnyGemmVariant variant, bool pdl) {
  if (!SkinnyGemmSupports(x, w, type, m, n, k, variant)) return cudaErrorInvalidValue;
  if (variant == SkinnyGemmVariant::kMma) {
    return type == ElemType::kBF16
               ? LaunchMma<__nv_bfloat16>(x, w, bias, bias_type, gelu, m, n, k, out, out_type, pdl, stream)
               : LaunchMma<__half>(x, w, bias, bias_type, gelu, m, n, k, out, out_type, pdl, stream);
  }
  BLOSSOM_DISPATCH_ELEM(type, T,
                        return LaunchFor<T>(x, w, bias, bias_type, gelu, m, n, k, out, out_type, variant, pdl,
                                            stream));
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace blossom
