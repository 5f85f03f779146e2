// Vectorised bloom_gelu for the GEMM epilogue.
//
// bloom_gelu(x) = x * 0.5 * (1 + tanh(u)), u = 0.79788456 * x * (1 + 0.044715 * x^2), in HF's
// form, with tanh from our own exp (range reduction by ln 2, degree-6 polynomial, ~1 ulp), so that
// the AVX2 path and the portable path run the same IEEE operations and agree bit for bit.
// Elementwise, so batch invariance is untouched. Against std::tanh the result differs by a few
// ulp of 1 + tanh(u).
#ifndef BLOSSOM_KERNELS_CPU_ACTIVATION_H_
#define BLOSSOM_KERNELS_CPU_ACTIVATION_H_

#include <cstdint>

namespace blossom {

// v[i] = bloom_gelu(v[i]) for i < n. avx2: use the AVX2/FMA path (the caller checked
// CpuHasAvx2Fma()); otherwise the portable one.
void BloomGeluInPlace(float* v, int64_t n, bool avx2);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_ACTIVATION_H_
