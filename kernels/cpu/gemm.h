// Batch-invariant GEMM for the CPU backend: out[M, N] = x[M, K] * w[N, K]^T (+ bias).
//
// Why our own kernel rather than BLAS: BLAS libraries pick different code paths for different M
// (gemv for M = 1, other blockings for larger M), so a row's result changes with the batch it
// is in. Here every output element is computed with one fixed sequence of operations (8 fp64 lane
// partial sums over K in steps of 8, a scalar tail, a fixed reduction tree), whatever M, the
// thread count or the tile it lands in. That makes a request's output bit-identical alone or in
// any batch on the CPU backend.
//
// x and out are fp32; w may be F32, F16 or BF16 (converted to fp32 a tile at a time, so
// half-precision weights are never expanded in full). Thread-safe: no shared mutable state.
#ifndef BLOSSOM_KERNELS_CPU_GEMM_H_
#define BLOSSOM_KERNELS_CPU_GEMM_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dtype.h"

namespace blossom {

struct GemmArgs {
  const float* x = nullptr;  // [M, K]
  const void* w = nullptr;   // [N, K] in w_dtype
  DType w_dtype = DType::kF32;
  const void* bias = nullptr;  // [N] in bias_dtype, or null
  DType bias_dtype = DType::kF32;
  float* out = nullptr;  // [M, N]
  int64_t m = 0, n = 0, k = 0;
  Activation activation = Activation::kNone;
};

void GemmNT(const GemmArgs& args, ThreadPool* pool);

// bloom_gelu as in Hugging Face: x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x))).
float BloomGelu(float x);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_GEMM_H_
