#include "kernels/cpu/activation.h"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

// exp(t) for t in [kMinArg, 0] (Cephes expf: t = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6
// polynomial, ~1 ulp). Below kMinArg the clamp is harmless: tanh has rounded to +-1 long before.
constexpr float kMinArg = -88.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
constexpr float kGeluA = 0.79788456f, kGeluB = 0.044715f;

// HF's formula, x * 0.5 * (1 + tanh(u)), with tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|).
// Keeping the oracle's form (not the algebraically equal x / (1 + exp(-2u))) keeps its rounding
// behaviour, e.g. the cancellation in 1 + tanh(u) for negative x, so results stay closer to it.
float GeluScalar(float x) {
  const float u = kGeluA * x * std::fma(kGeluB * x, x, 1.0f);
  const float t = std::fmax(-2.0f * std::fabs(u), kMinArg);
  const float n = std::nearbyint(t * kLog2e);
  float r = std::fma(-n, kLn2Hi, t);
  r = std::fma(-n, kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  p = std::fma(p, r * r, r + 1.0f);
  const float e = std::ldexp(p, static_cast<int>(n));
  const float th = std::copysign((1.0f - e) / (1.0f + e), u);
  return x * 0.5f * (1.0f + th);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void GeluAvx2(float* v, int64_t n) {
  const __m256 a = _mm256_set1_ps(kGeluA), b = _mm256_set1_ps(kGeluB), one = _mm256_set1_ps(1.0f),
               sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    const __m256 u = _mm256_mul_ps(_mm256_mul_ps(a, x), _mm256_fmadd_ps(_mm256_mul_ps(b, x), x, one));
    const __m256 abs_u = _mm256_andnot_ps(sign, u);
    const __m256 t = _mm256_max_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), abs_u), _mm256_set1_ps(kMinArg));
    const __m256 nf = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(kLog2e)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(kLn2Hi), t);
    r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, one));
    // 2^n with n in [-127, 0]: n = -127 gives 0 instead of 2^-127, invisible after 1 +- e.
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
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
