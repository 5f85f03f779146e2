#include "kernels/cpu/vector_ops.h"

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
#endif

}  // namespace

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
