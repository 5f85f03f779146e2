// Short fp32 vector primitives for attention (q.k dot products, p * v accumulation over head_dim,
// over fp32 or bf16 key and value rows), with a portable path and an AVX2/FMA path that run the same IEEE operations (bit-identical).
//
// Dot order (as dot_tile.h): 8 FMA lanes over the vector, lanes reduced as
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then a scalar FMA tail. Each (token, head)
// is computed from its own data only, so attention stays batch invariant.
#ifndef BLOSSOM_KERNELS_CPU_VECTOR_OPS_H_
#define BLOSSOM_KERNELS_CPU_VECTOR_OPS_H_

#include <cstdint>

namespace blossom {

// sum a[i] * b[i], i < n. avx2: the caller checked CpuHasAvx2Fma().
float DotF32(const float* a, const float* b, int64_t n, bool avx2);
// y[i] = fma(alpha, x[i], y[i]) for i < n.
void AxpyF32(float alpha, const float* x, float* y, int64_t n, bool avx2);

// Attention's two loops over the keys of one (query, head), with the keys' rows given by pointer
// (the paged KV cache scatters them). Same bits as the one-row calls they replace:
// out[j] = DotF32(q, rows[j], d) for j < n.
void DotRowsF32(const float* q, const float* const* rows, int64_t n, int64_t d, float* out,
                bool avx2);
// For j = 0 .. n-1 in order: AxpyF32(weights[j], rows[j], y, d).
void AxpyRowsF32(const float* weights, const float* const* rows, int64_t n, int64_t d, float* y,
                 bool avx2);

// The same over rows of bf16 values (uint16_t: the bits; a bf16 KV cache), widened exactly in
// registers: the bits the fp32 functions give rows holding the same values.
float DotBf16(const float* a, const uint16_t* b, int64_t n, bool avx2);
void DotRowsBf16(const float* q, const uint16_t* const* rows, int64_t n, int64_t d, float* out,
                 bool avx2);
void AxpyRowsBf16(const float* weights, const uint16_t* const* rows, int64_t n, int64_t d, float* y,
                  bool avx2);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_VECTOR_OPS_H_
