#include "kernels/cpu/vector_ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

// Element i of a row of fp32 or bf16 values (uint16_t: bf16 bits), as fp32: the widening is exact,
// so every operation below gives a bf16 row the bits its fp32 copy would get.
inline float At(const float* r, int64_t i) { return r[i]; }
inline float At(const uint16_t* r, int64_t i) { return BF16ToFloat(r[i]); }

template <typename T>
float Finish(const float l[8], const float* a, const T* b, int64_t n8, int64_t n) {
  float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (int64_t i = n8; i < n; ++i) s = std::fma(a[i], At(b, i), s);
  return s;
}

template <typename T>
float DotPortable(const float* a, const T* b, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n8; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] = std::fma(a[i + l], At(b, i + l), lanes[l]);
  return Finish(lanes, a, b, n8, n);
}

template <typename T>
void AxpyPortable(float alpha, const T* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(alpha, At(x, i), y[i]);
}

#if defined(__x86_64__)
#define VECTOR_OPS_AVX2 __attribute__((target("avx2,fma")))

// Eight values of a row from element 0 of p, as fp32 (bf16: zero-extended and shifted up).
VECTOR_OPS_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
VECTOR_OPS_AVX2 inline __m256 Load8(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

template <typename T>
VECTOR_OPS_AVX2 float DotAvx2(const float* a, const T* b, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), Load8(b + i), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  return Finish(lanes, a, b, n8, n);
}

template <typename T>
VECTOR_OPS_AVX2 void AxpyAvx2(float alpha, const T* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, Load8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(alpha, At(x, i), y[i]);
}

// Four dot products at a time (four independent FMA chains instead of one), each reduced in the
// contract's order with vector adds: lo + hi gives p = (l0+l4, l1+l5, l2+l6, l3+l7); after a 4x4
// transpose of the four p vectors, (P0 + P2) + (P1 + P3) is ((l0+l4) + (l2+l6)) + ((l1+l5) +
// (l3+l7)) for each row, the sum Finish forms. d must be a multiple of 8 (no scalar tail).
template <typename T>
VECTOR_OPS_AVX2 void Dot4RowsAvx2(const float* q, const T* const* rows, int64_t d, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t i = 0; i < d; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(qv, Load8(rows[r] + i), acc[r]);
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
template <typename T>
VECTOR_OPS_AVX2 void AxpyRowsAvx2(const float* weights, const T* const* rows, int64_t n, int64_t d,
                                  float* y) {
  for (int64_t i0 = 0; i0 < d; i0 += 64) {
    const int vecs = static_cast<int>(std::min<int64_t>(64, d - i0) / 8);
    __m256 acc[8];
    for (int v = 0; v < vecs; ++v) acc[v] = _mm256_loadu_ps(y + i0 + 8 * v);
    if (vecs == 8) {
      for (int64_t j = 0; j < n; ++j) {
        const __m256 w = _mm256_set1_ps(weights[j]);
        const T* x = rows[j] + i0;
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(w, Load8(x + 8 * v), acc[v]);
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const __m256 w = _mm256_set1_ps(weights[j]);
        const T* x = rows[j] + i0;
        for (int v = 0; v < vecs; ++v) acc[v] = _mm256_fmadd_ps(w, Load8(x + 8 * v), acc[v]);
      }
    }
    for (int v = 0; v < vecs; ++v) _mm256_storeu_ps(y + i0 + 8 * v, acc[v]);
  }
}

#undef VECTOR_OPS_AVX2
#endif

template <typename T>
float Dot(const float* a, const T* b, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) return DotAvx2(a, b, n);
#endif
  return DotPortable(a, b, n);
}

template <typename T>
void Axpy(float alpha, const T* x, float* y, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) {
    AxpyAvx2(alpha, x, y, n);
    return;
  }
#endif
  AxpyPortable(alpha, x, y, n);
}

template <typename T>
void DotRows(const float* q, const T* const* rows, int64_t n, int64_t d, float* out, bool avx2) {
  int64_t j = 0;
#if defined(__x86_64__)
  if (avx2 && d % 8 == 0)
    for (; j + 4 <= n; j += 4) Dot4RowsAvx2(q, rows + j, d, out + j);
#endif
  for (; j < n; ++j) out[j] = Dot(q, rows[j], d, avx2);
}

template <typename T>
void AxpyRows(const float* weights, const T* const* rows, int64_t n, int64_t d, float* y, bool avx2) {
#if defined(__x86_64__)
  if (avx2 && d % 8 == 0) {
    AxpyRowsAvx2(weights, rows, n, d, y);
    return;
  }
#endif
  for (int64_t j = 0; j < n; ++j) Axpy(weights[j], rows[j], y, d, avx2);
}

}  // namespace

void DotRowsF32(const float* q, const float* const* rows, int64_t n, int64_t d, float* out,
                bool avx2) {
  DotRows(q, rows, n, d, out, avx2);
}

void AxpyRowsF32(const float* weights, const float* const* rows, int64_t n, int64_t d, float* y,
                 bool avx2) {
  AxpyRows(weights, rows, n, d, y, avx2);
}

void DotRowsBf16(const float* q, const uint16_t* const* rows, int64_t n, int64_t d, float* out,
                 bool avx2) {
  DotRows(q, rows, n, d, out, avx2);
}

void AxpyRowsBf16(const float* weights, const uint16_t* const* rows, int64_t n, int64_t d, float* y,
                  bool avx2) {
  AxpyRows(weights, rows, n, d, y, avx2);
}

float DotF32(const float* a, const float* b, int64_t n, bool avx2) { return Dot(a, b, n, avx2); }

float DotBf16(const float* a, const uint16_t* b, int64_t n, bool avx2) { return Dot(a, b, n, avx2); }

void AxpyF32(float alpha, const float* x, float* y, int64_t n, bool avx2) { Axpy(alpha, x, y, n, avx2); }

}  // namespace blossom
