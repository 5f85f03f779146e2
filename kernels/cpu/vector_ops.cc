#include "kernels/cpu/vector_ops.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

float Finish(const float l[8], const float* a, const float* b, int64_t n8, int64_t n) {
  float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (int64_t i = n8; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float DotAvx2(const float* a, const float* b, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n8; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  return Finish(lanes, a, b, n8, n);
}

__attribute__((target("avx2,fma"))) void AxpyAvx2(float alpha, const float* x, float* y,
                                                  int64_t n) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(alpha, x[i], y[i]);
}

// Four dot products at a time (four independent FMA chains instead of one), each reduced in the
// contract's order with vector adds: lo + hi gives p = (l0+l4, l1+l5, l2+l6, l3+l7); after a 4x4
// transpose of the four p vectors, (P0 + P2) + (P1 + P3) is ((l0+l4) + (l2+l6)) + ((l1+l5) +
// (l3+l7)) for each row, the sum Finish forms. d must be a multiple of 8 (no scalar tail).
__attribute__((target("avx2,fma"))) void Dot4RowsAvx2(const float* q, const float* const* rows,
                                                      int64_t d, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t i = 0; i < d; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(rows[r] + i), acc[r]);
  }
  __m128 p[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
    p[r] = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
  _MM_TRANSPOSE4_PS(p[0], p[1], p[2], p[3]);
  _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(p[0], p[2]), _mm_add_ps(p[1], p[3])));
}

// y[0, d) stays in registers (up to 64 floats at a time) while every row is added into it: the
// same FMA per element in the same order as one AxpyAvx2 per row, without a load and a store
// of y per row. d must be a multiple of 8.
__attribute__((target("avx2,fma"))) void AxpyRowsAvx2(const float* weights,
                                                      const float* const* rows, int64_t n,
                                                      int64_t d, float* y) {
  for (int64_t i0 = 0; i0 < d; i0 += 64) {
    const int vecs = static_cast<int>(std::min<int64_t>(64, d - i0) / 8);
    __m256 acc[8];
    for (int v = 0; v < vecs; ++v) acc[v] = _mm256_loadu_ps(y + i0 + 8 * v);
    if (vecs == 8) {
      for (int64_t j = 0; j < n; ++j) {
        const __m256 w = _mm256_set1_ps(weights[j]);
        const float* x = rows[j] + i0;
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + 8 * v), acc[v]);
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const __m256 w = _mm256_set1_ps(weights[j]);
        const float* x = rows[j] + i0;
        for (int v = 0; v < vecs; ++v)
          acc[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + 8 * v), acc[v]);
      }
    }
    for (int v = 0; v < vecs; ++v) _mm256_storeu_ps(y + i0 + 8 * v, acc[v]);
  }
}
#endif

}  // namespace

void DotRowsF32(const float* q, const float* const* rows, int64_t n, int64_t d, float* out,
                bool avx2) {
  int64_t j = 0;
#if defined(__x86_64__)
  if (avx2 && d % 8 == 0)
    for (; j + 4 <= n; j += 4) Dot4RowsAvx2(q, rows + j, d, out + j);
#endif
  for (; j < n; ++j) out[j] = DotF32(q, rows[j], d, avx2);
}

void AxpyRowsF32(const float* weights, const float* const* rows, int64_t n, int64_t d, float* y,
                 bool avx2) {
#if defined(__x86_64__)
  if (avx2 && d % 8 == 0) {
    AxpyRowsAvx2(weights, rows, n, d, y);
    return;
  }
#endif
  for (int64_t j = 0; j < n; ++j) AxpyF32(weights[j], rows[j], y, d, avx2);
}

float DotF32(const float* a, const float* b, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) return DotAvx2(a, b, n);
#endif
  const int64_t n8 = n & ~int64_t{7};
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n8; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] = std::fma(a[i + l], b[i + l], lanes[l]);
  return Finish(lanes, a, b, n8, n);
}

void AxpyF32(float alpha, const float* x, float* y, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) {
    AxpyAvx2(alpha, x, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(alpha, x[i], y[i]);
}

}  // namespace blossom
