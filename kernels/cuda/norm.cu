// Row-reduction kernels of the CUDA backend (LayerNorm with fused residual add, softmax, argmax)
// and the CUDA-core fallback GEMM for shapes cuBLASLt has no algorithm for.
//
// Row kernels use one block per row: a row (<= a few hundred KB) stays in L1/L2 between passes,
// so re-reading it is cheaper than staging it in shared memory, and every reduction is a fixed
// tree (warp shuffles, then one warp over the warp partials), so a row's result does not depend
// on the other rows of the batch.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace blossom {
namespace cuda {
namespace {

int RowThreads(int64_t cols, int max_threads) {
  int64_t t = (cols + 3) / 4;  // about four elements per thread
  t = (t + 31) / 32 * 32;
  return static_cast<int>(std::max<int64_t>(32, std::min<int64_t>(max_threads, t)));
}

template <typename TA, typename TP, typename TO>
__global__ void LayerNormKernel(const TA* __restrict__ x, TA* residual, const TP* __restrict__ gamma,
                                const TP* __restrict__ beta, float eps, int64_t hidden,
                                TO* __restrict__ out) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const TA* in = x + r * hidden;
  TA* res = residual != nullptr ? residual + r * hidden : nullptr;
  // Pass 1: (residual += x) and the sum. The stored residual is rounded to its dtype, and the
  // statistics use that rounded value, so what the next layer reads is what was normalised.
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = ToF32<TA>(in[i]);
    if (res != nullptr) {
      const TA stored = FromF32<TA>(ToF32<TA>(res[i]) + v);
      res[i] = stored;
      v = ToF32<TA>(stored);
    }
    sum += v;
  }
  const float mean = BlockSum(sum, scratch) / static_cast<float>(hidden);
  const TA* src = res != nullptr ? res : in;  // each thread re-reads only what it wrote
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float dv = ToF32<TA>(src[i]) - mean;
    sq += dv * dv;
  }
  const float var = BlockSum(sq, scratch) / static_cast<float>(hidden);  // biased, like torch
  const float inv_std = rsqrtf(var + eps);
  TO* o = out + r * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = (ToF32<TA>(src[i]) - mean) * inv_std;
    o[i] = FromF32<TO>(v * ToF32<TP>(gamma[i]) + ToF32<TP>(beta[i]));
  }
}

// The common case (activations, gamma/beta and output of one dtype, rows a multiple of 16
// bytes): the same three passes, 16 bytes per access.
template <typename T>
__global__ void LayerNormVecKernel(const T* __restrict__ x, T* residual, const T* __restrict__ gamma,
                                   const T* __restrict__ beta, float eps, int64_t hidden,
                                   T* __restrict__ out) {
  constexpr int kN = Vec<T>::kN;
  __shared__ float scratch[32];
  PdlEnter();
  const int64_t r = blockIdx.x;
  const int64_t nv = hidden / kN;
  const T* in = x + r * hidden;
  T* res = residual != nullptr ? residual + r * hidden : nullptr;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
    float v[kN];
    Load16Coherent(in + i * kN, v);
    if (res != nullptr) {
      float rv[kN];
      Load16Coherent(res + i * kN, rv);
#pragma unroll
      for (int j = 0; j < kN; ++j) rv[j] += v[j];
      Store16(res + i * kN, rv);
      Load16Coherent(res + i * kN, v);  // the rounded values, as stored
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) sum += v[j];
  }
  const float mean = BlockSum(sum, scratch) / static_cast<float>(hidden);
  const T* src = res != nullptr ? res : in;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
    float v[kN];
    Load16Coherent(src + i * kN, v);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float dv = v[j] - mean;
      sq += dv * dv;
    }
  }
  const float var = BlockSum(sq, scratch) / static_cast<float>(hidden);
  const float inv_std = rsqrtf(var + eps);
  T* o = out + r * hidden;
  for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
    float v[kN], g[kN], b[kN];
    Load16Coherent(src + i * kN, v);
    Load16(gamma + i * kN, g);
    Load16(beta + i * kN, b);
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = (v[j] - mean) * inv_std * g[j] + b[j];
    Store16(o + i * kN, v);
  }
}

// LayerNormVecKernel with the row held in registers (at most kLnRegVecs 16-byte vectors per
// thread, the same thread count and the same vectors per thread): one round of loads (x,
// residual, gamma and beta all in flight at once) instead of three passes that each wait on
// L2, so a decode step's LayerNorm is one memory latency plus the two reductions. Every sum runs
// in the same order as LayerNormVecKernel's, and the stored residual is rounded the same way,
// so the two give the same bits.
// At most kLnRegMaxThreads threads (115 registers each for bf16: 1024 would not fit an SM's
// register file).
constexpr int kLnRegVecs = 4;
constexpr int kLnRegMaxThreads = 512;

template <typename T>
__global__ void __launch_bounds__(kLnRegMaxThreads)
    LayerNormRegKernel(const T* __restrict__ x, T* residual, const T* __restrict__ gamma, const T* __restrict__ beta,
                       float eps, int64_t hidden, T* __restrict__ out) {
  constexpr int kN = Vec<T>::kN;
  __shared__ float scratch[32];
  PdlEnter();
  const int64_t r = blockIdx.x;
  const int32_t nv = static_cast<int32_t>(hidden / kN);
  const T* in = x + r * hidden;
  T* res = residual != nullptr ? residual + r * hidden : nullptr;
  float v[kLnRegVecs][kN];
  uint4 g_raw[kLnRegVecs], b_raw[kLnRegVecs];
#pragma unroll
  for (int k = 0; k < kLnRegVecs; ++k) {
    const int32_t i = threadIdx.x + k * blockDim.x;
    if (i < nv) {
      Load16Coherent(in + i * kN, v[k]);
      g_raw[k] = __ldg(reinterpret_cast<const uint4*>(gamma + i * kN));
      b_raw[k] = __ldg(reinterpret_cast<const uint4*>(beta + i * kN));
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kLnRegVecs; ++k) {
    const int32_t i = threadIdx.x + k * blockDim.x;
    if (i >= nv) continue;
    if (res != nullptr) {
      float rv[kN];
      Load16Coherent(res + i * kN, rv);
#pragma unroll
      for (int j = 0; j < kN; ++j) v[k][j] = ToF32<T>(FromF32<T>(rv[j] + v[k][j]));  // as stored
      Store16(res + i * kN, v[k]);
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) sum += v[k][j];
  }
  const float mean = BlockSum(sum, scratch) / static_cast<float>(hidden);
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kLnRegVecs; ++k) {
    if (threadIdx.x + k * blockDim.x >= nv) continue;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float dv = v[k][j] - mean;
      sq += dv * dv;
    }
  }
  const float var = BlockSum(sq, scratch) / static_cast<float>(hidden);
  const float inv_std = rsqrtf(var + eps);
  T* o = out + r * hidden;
#pragma unroll
  for (int k = 0; k < kLnRegVecs; ++k) {
    const int32_t i = threadIdx.x + k * blockDim.x;
    if (i >= nv) continue;
    const T* ge = reinterpret_cast<const T*>(&g_raw[k]);
    const T* be = reinterpret_cast<const T*>(&b_raw[k]);
#pragma unroll
    for (int j = 0; j < kN; ++j) v[k][j] = (v[k][j] - mean) * inv_std * ToF32<T>(ge[j]) + ToF32<T>(be[j]);
    Store16(o + i * kN, v[k]);
  }
}

template <typename T>
__global__ void SoftmaxKernel(const T* x, int64_t cols, float* out) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* in = x + r * cols;  // may alias out (same element read, then written, per thread)
  float* o = out + r * cols;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, ToF32<T>(in[i]));
  mx = BlockMax(mx, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) sum += expf(ToF32<T>(in[i]) - mx);
  const float inv = 1.0f / BlockSum(sum, scratch);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = expf(ToF32<T>(in[i]) - mx) * inv;
}

// (value, index) with ties to the lower index.
__device__ __forceinline__ void ArgmaxCombine(float& v, int64_t& i, float ov, int64_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

template <typename T>
__global__ void ArgmaxKernel(const T* __restrict__ x, int64_t cols, int32_t* __restrict__ out) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const int64_t r = blockIdx.x;
  const T* in = x + r * cols;
  float best = -INFINITY;
  int64_t best_i = cols;  // sentinel above every real index
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = ToF32<T>(in[i]);
    if (v > best || best_i == cols) {  // strict: keeps the lowest of equal values
      best = v;
      best_i = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    ArgmaxCombine(best, best_i, ov, oi);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    best = lane < warps ? sv[lane] : -INFINITY;
    best_i = lane < warps ? si[lane] : cols;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      ArgmaxCombine(best, best_i, ov, oi);
    }
    // A row of NaNs compares false everywhere: report index 0, as the CPU loop does.
    if (lane == 0) out[r] = static_cast<int32_t>(best_i >= cols ? 0 : best_i);
  }
}

// 64x64 output tile per block, K in steps of 16, 256 threads each owning a 4x4 sub-tile.
constexpr int kTm = 64, kTn = 64, kTk = 16;

template <typename TX, typename TW, typename TB, typename TO>
__global__ void __launch_bounds__(256) FallbackGemmKernel(const TX* __restrict__ x,
                                                          const TW* __restrict__ w,
                                                          const TB* __restrict__ bias, bool gelu,
                                                          int64_t m, int64_t n, int64_t k,
                                                          TO* __restrict__ out) {
  __shared__ float xs[kTk][kTm + 1];
  __shared__ float ws[kTk][kTn + 1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTm;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTn;
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTk) {
    for (int i = threadIdx.x; i < kTm * kTk; i += blockDim.x) {
      const int rr = i / kTk, kk = i % kTk;
      const int64_t gr = row0 + rr, gk = k0 + kk;
      xs[kk][rr] = (gr < m && gk < k) ? ToF32<TX>(x[gr * k + gk]) : 0.0f;
      const int64_t gc = col0 + rr;
      ws[kk][rr] = (gc < n && gk < k) ? ToF32<TW>(w[gc * k + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTk; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[kk][tr * 4 + i];
        b[i] = ws[kk][tc * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t gr = row0 + tr * 4 + i;
    if (gr >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t gc = col0 + tc * 4 + j;
      if (gc >= n) continue;
      float v = acc[i][j];
      if (bias != nullptr) v += ToF32<TB>(bias[gc]);
      if (gelu) v = BloomGelu(v);
      out[gr * n + gc] = FromF32<TO>(v);
    }
  }
}

}  // namespace

cudaError_t LaunchLayerNorm(const void* x, void* residual, ElemType act_type, const void* gamma,
                            const void* beta, ElemType param_type, float eps, int64_t rows,
                            int64_t hidden, void* out, ElemType out_type, cudaStream_t stream,
                            bool registers, bool pdl) {
  if (rows == 0) return cudaSuccess;
  const int64_t kn = 16 / static_cast<int64_t>(ElemSize(act_type));
  if (act_type == param_type && act_type == out_type && hidden % kn == 0 && Aligned16(x) &&
      Aligned16(out) && Aligned16(gamma) && Aligned16(beta) && (residual == nullptr || Aligned16(residual))) {
    const int threads = RowThreads(hidden / kn, 1024);
    const bool in_registers =
        registers && threads <= kLnRegMaxThreads && hidden / kn <= static_cast<int64_t>(kLnRegVecs) * threads;
    BLOSSOM_DISPATCH_ELEM(act_type, T,
                          return LaunchKernel(pdl, in_registers ? &LayerNormRegKernel<T> : &LayerNormVecKernel<T>,
                                              dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream,
                                              static_cast<const T*>(x), static_cast<T*>(residual),
                                              static_cast<const T*>(gamma), static_cast<const T*>(beta), eps, hidden,
                                              static_cast<T*>(out)));
  }
  const int threads = RowThreads(hidden, 1024);
  BLOSSOM_DISPATCH_ELEM(act_type, TA,
      BLOSSOM_DISPATCH_ELEM(param_type, TP,
          BLOSSOM_DISPATCH_ELEM(out_type, TO,
              LayerNormKernel<TA, TP, TO><<<rows, threads, 0, stream>>>(
                  static_cast<const TA*>(x), static_cast<TA*>(residual),
                  static_cast<const TP*>(gamma), static_cast<const TP*>(beta), eps, hidden,
                  static_cast<TO*>(out)))));
  return cudaGetLastError();
}

cudaError_t LaunchSoftmax(const void* x, ElemType x_type, int64_t rows, int64_t cols, float* out,
                          cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int threads = RowThreads(cols, 1024);
  BLOSSOM_DISPATCH_ELEM(x_type, T,
                        SoftmaxKernel<T><<<rows, threads, 0, stream>>>(static_cast<const T*>(x),
                                                                      cols, out));
  return cudaGetLastError();
}

cudaError_t LaunchArgmax(const void* x, ElemType x_type, int64_t rows, int64_t cols, int32_t* out,
                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int threads = RowThreads(cols, 1024);
  BLOSSOM_DISPATCH_ELEM(x_type, T,
                        ArgmaxKernel<T><<<rows, threads, 0, stream>>>(static_cast<const T*>(x),
                                                                     cols, out));
  return cudaGetLastError();
}

cudaError_t LaunchFallbackGemm(const void* x, ElemType x_type, const void* w, ElemType w_type,
                               const void* bias, ElemType bias_type, bool gelu, int64_t m,
                               int64_t n, int64_t k, void* out, ElemType out_type,
                               cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (x_type != w_type) return cudaErrorInvalidValue;
  const dim3 grid(CeilDiv(n, kTn), CeilDiv(m, kTm));
  if (grid.y > 65535) return cudaErrorInvalidConfiguration;
  BLOSSOM_DISPATCH_ELEM(x_type, TX,
      BLOSSOM_DISPATCH_ELEM(bias_type, TB,
          BLOSSOM_DISPATCH_ELEM(out_type, TO,
              FallbackGemmKernel<TX, TX, TB, TO><<<grid, 256, 0, stream>>>(
                  static_cast<const TX*>(x), static_cast<const TX*>(w),
                  static_cast<const TB*>(bias), gelu, m, n, k, static_cast<TO*>(out)))));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace blossom
