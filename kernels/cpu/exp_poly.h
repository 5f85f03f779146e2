// exp(t) for t <= 0 in fp32 with the same IEEE operations on every path (scalar with std::fma,
// AVX2, AVX-512), so kernels built on it agree bit for bit across instruction sets: Cephes expf's
// range reduction t = n ln2 + r (|r| <= ln2 / 2) and degree-6 polynomial, about 1 ulp, then a
// multiply by 2^n built from its bits.
//
// Below kZeroBelow the result is 0, not e^t (< 2e-22). No softmax sum (>= 1) or 1 +- e^t can see
// the difference, and it keeps subnormals out: a softmax weight of 1e-38 (ALiBi scores of far
// keys reach -300) times a value row makes subnormal operands, and Intel CPUs take a microcode
// assist of about 100 cycles for each; attention over 512 tokens ran 17x slower with them.
//
// Used by bloom_gelu's tanh (activation.cc) and attention's softmax (attention.cc). glibc's expf
// is not an option for those: it is scalar, and its result depends on whether glibc picked its
// FMA variant at run time.
#ifndef BLOSSOM_KERNELS_CPU_EXP_POLY_H_
#define BLOSSOM_KERNELS_CPU_EXP_POLY_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace exp_poly {

constexpr float kZeroBelow = -50.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

}  // namespace exp_poly

// NaN gives NaN (the vector paths carry it through the polynomial).
inline float ExpNonPositive(float t) {
  using namespace exp_poly;
  if (std::isnan(t)) return t;
  if (t < kZeroBelow) return 0.0f;
  const float n = std::nearbyint(t * kLog2e);
  float r = std::fma(-n, kLn2Hi, t);
  r = std::fma(-n, kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  p = std::fma(p, r * r, r + 1.0f);
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return p * two_n;
}

#if defined(__x86_64__)
// Lanes below kZeroBelow run the polynomial on kZeroBelow (any finite value would do) and are
// zeroed at the end; NaN compares false, runs as NaN and stays NaN.
BLOSSOM_AVX2 inline __m256 ExpNonPositiveAvx2(__m256 t) {
  using namespace exp_poly;
  const __m256 zero = _mm256_cmp_ps(t, _mm256_set1_ps(kZeroBelow), _CMP_LT_OQ);
  t = _mm256_blendv_ps(t, _mm256_set1_ps(kZeroBelow), zero);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), t);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(zero, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

BLOSSOM_AVX512 inline __m512 ExpNonPositiveAvx512(__m512 t) {
  using namespace exp_poly;
  const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(kZeroBelow), _CMP_NLT_UQ);
  t = _mm512_mask_blend_ps(keep, _mm512_set1_ps(kZeroBelow), t);
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kP0), r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(bits));
}
#endif

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_EXP_POLY_H_
