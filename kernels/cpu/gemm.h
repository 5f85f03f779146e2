// Batch-invariant GEMM for the CPU backend: out[M, N] = x[M, K] * w[N, K]^T (+ bias).
//
// Why our own kernel rather than BLAS: BLAS libraries pick different code paths for different M
// (gemv for M = 1, other blockings for larger M), so a row's result changes with the batch it
// is in. Here every output element is one dot product computed in the fixed order of
// dot_tile.h (fp32 FMAs in 8 lanes over blocks of K, folded into fp64, a scalar tail), whatever M,
// the thread count, the tile it lands in or the instruction set. That makes a request's output
// bit-identical alone or in any batch on the CPU backend.
//
// Weights are used in place, row-major [N, K] as the checkpoint stores them: for dot-product
// micro-kernels that layout already is the panel layout (each weight row is read once,
// contiguously, per tile), so nothing is repacked at load time and the tied embedding stays one
// zero-copy array shared by the lookup and the LM head. F16/BF16 rows are widened in registers.
//
// Threading: over output columns only (decode: 8 columns per tile; prefill: 4 x-rows against a
// ~192 KiB panel of weight rows, kept in L2 while every x row passes over it). x and out are fp32.
// Thread-safe: no shared mutable state, no allocation.
#ifndef BLOSSOM_KERNELS_CPU_GEMM_H_
#define BLOSSOM_KERNELS_CPU_GEMM_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dtype.h"

namespace blossom {

struct GemmArgs {
  const float* x = nullptr;  // [M, K]
  // [N, K] in w_dtype: F32, F16 or BF16 row-major, or their row-paired forms
  // (weight_pairs.h; K a multiple of 8), which give the same bits faster on AVX-512.
  const void* w = nullptr;
  DType w_dtype = DType::kF32;
  const void* bias = nullptr;  // [N] in bias_dtype, or null
  DType bias_dtype = DType::kF32;
  float* out = nullptr;  // [M, N]
  int64_t m = 0, n = 0, k = 0;
  Activation activation = Activation::kNone;
};

// Which micro-kernels run. Every path gives bit-identical results (same IEEE operations);
// kAuto picks the fastest this CPU supports.
// kAvx512: the AVX-512 kernels for 4-row tiles and the AVX2 ones for the rest.
enum class GemmIsa : uint8_t { kAuto = 0, kPortable = 1, kAvx2 = 2, kAvx512 = 3 };
const char* GemmIsaName(GemmIsa isa);
// True if this CPU can run `isa` (kAuto and kPortable always).
bool GemmIsaSupported(GemmIsa isa);
// The path kAuto resolves to on this CPU.
GemmIsa BestGemmIsa();

// isa must be supported (checked by the caller; an unsupported one falls back to kPortable).
void GemmNT(const GemmArgs& args, ThreadPool* pool, GemmIsa isa = GemmIsa::kAuto);

// bloom_gelu as in Hugging Face: x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x))),
// the same function (same bits) the GEMM's epilogue applies (activation.h).
float BloomGelu(float x);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_GEMM_H_
