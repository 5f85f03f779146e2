#include "kernels/cpu/activation.h"

#include <cmath>

#include "kernels/cpu/exp_poly.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

constexpr float kGeluA = 0.79788456f, kGeluB = 0.044715f;

// HF's formula, x * 0.5 * (1 + tanh(u)), with tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|).
// Keeping the oracle's form (not the algebraically equal x / (1 + exp(-2u))) keeps its rounding
// behaviour, e.g. the cancellation in 1 + tanh(u) for negative x, so results stay closer to it.
float GeluScalar(float x) {
  const float u = kGeluA * x * std::fma(kGeluB * x, x, 1.0f);
  const float e = ExpNonPositive(-2.0f * std::fabs(u));
  const float th = std::copysign((1.0f - e) / (1.0f + e), u);
  return x * 0.5f * (1.0f + th);
}

#if defined(__x86_64__)
BLOSSOM_AVX2 void GeluAvx2(float* v, int64_t n) {
  const __m256 a = _mm256_set1_ps(kGeluA), b = _mm256_set1_ps(kGeluB), one = _mm256_set1_ps(1.0f),
               sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    const __m256 u = _mm256_mul_ps(_mm256_mul_ps(a, x), _mm256_fmadd_ps(_mm256_mul_ps(b, x), x, one));
    const __m256 abs_u = _mm256_andnot_ps(sign, u);
    const __m256 e = ExpNonPositiveAvx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f), abs_u));
    __m256 th = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    th = _mm256_or_ps(th, _mm256_and_ps(sign, u));  // th >= 0 here, so this is copysign
    _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)), _mm256_add_ps(one, th)));
  }
  for (; i < n; ++i) v[i] = GeluScalar(v[i]);
}
#endif

}  // namespace

void BloomGeluInPlace(float* v, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) {
    GeluAvx2(v, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) v[i] = GeluScalar(v[i]);
}

}  // namespace blossom
