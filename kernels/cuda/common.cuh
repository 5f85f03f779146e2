// Device helpers shared by the .cu files of the CUDA backend: element conversion, 16-byte vector
// loads, warp and block reductions, and the ElemType -> C++ type dispatch.
#ifndef BLOSSOM_KERNELS_CUDA_COMMON_CUH_
#define BLOSSOM_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace blossom {
namespace cuda {

template <typename T>
__device__ __forceinline__ float ToF32(T v);
template <>
__device__ __forceinline__ float ToF32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float ToF32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float ToF32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Elements of T per 16-byte vector.
template <typename T>
struct Vec {
  static constexpr int kN = 16 / sizeof(T);
};

// Loads kN = 16/sizeof(T) elements from a 16-byte aligned address as fp32, through the
// read-only (non-coherent) cache: only for data no thread of the kernel writes.
template <typename T>
__device__ __forceinline__ void Load16(const T* p, float* out) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec<T>::kN; ++i) out[i] = ToF32<T>(e[i]);
}

// Same, through the coherent path: for data the kernel itself also writes.
template <typename T>
__device__ __forceinline__ void Load16Coherent(const T* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec<T>::kN; ++i) out[i] = ToF32<T>(e[i]);
}

template <typename T>
__device__ __forceinline__ void Store16(T* p, const float* in) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec<T>::kN; ++i) e[i] = FromF32<T>(in[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// BLOOM's gelu: tanh approximation with HF's constant 0.79788456 (not sqrt(2/pi) exactly).
__device__ __forceinline__ float BloomGelu(float x) {
  return x * 0.5f * (1.0f + tanhf(0.79788456f * x * (1.0f + 0.044715f * x * x)));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum; every thread gets the result. `scratch` holds >= 32 floats; blockDim.x is a
// multiple of 32. Ends with a barrier so scratch can be reused at once.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.0f;
  r = WarpSum(r);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpMax(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  r = WarpMax(r);
  __syncthreads();
  return r;
}

// NaN or +inf (-inf is a legitimate mask): a model fault that a row must report.
__device__ __forceinline__ bool NonFinite(float v) { return v != -INFINITY && !(v < INFINITY); }

__host__ __device__ inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Programmatic dependent launch (PDL, sm_90). A kernel launched with it (LaunchKernel with
// `pdl`) may be scheduled while the kernel before it on the stream is still running, so its
// launch latency hides behind that kernel's tail instead of adding to a decode step's ~300
// launches. Every kernel that can be launched so calls PdlEnter() first, before it touches any
// global memory: it waits until the kernel before it has completed and its writes are visible,
// then lets the next such kernel launch (PTX griddepcontrol.wait, .launch_dependents). Waiting
// first keeps at most one kernel scheduled ahead of the one running. Without PDL both are
// no-ops, so the same kernel runs either way.
__device__ __forceinline__ void PdlEnter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when
// `pdl` (the kernel must start with PdlEnter()).
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// D += A B on the tensor cores: mma.sync.m16n8k16, f16/bf16 inputs, fp32 accumulators.
// Fragment layouts (PTX ISA; g = lane / 4, t = lane % 4), each 32-bit register two elements with
// the lower k (or column) index in the low half:
//   A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8, f32):  c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1)
template <typename T>
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void Mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

inline unsigned CeilDiv(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace cuda
}  // namespace blossom

// Runs BODY with `T` bound to the C++ type of ElemType `et`.
#define BLOSSOM_DISPATCH_ELEM(et, T, ...)                        \
  switch (et) {                                                  \
    case ::blossom::cuda::ElemType::kF16: {                      \
      using T = __half;                                          \
      __VA_ARGS__;                                               \
    } break;                                                     \
    case ::blossom::cuda::ElemType::kBF16: {                     \
      using T = __nv_bfloat16;                                   \
      __VA_ARGS__;                                               \
    } break;                                                     \
    default: {                                                   \
      using T = float;                                           \
      __VA_ARGS__;                                               \
    } break;                                                     \
  }

#endif  // BLOSSOM_KERNELS_CUDA_COMMON_CUH_
