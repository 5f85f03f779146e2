#include "kernels/cpu/exp_poly.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace blossom {
namespace {

// Arguments the kernels meet: softmax's s - max and gelu's -2|u|, the cutoff's neighbourhood, and
// both zeros.
std::vector<float> Arguments() {
  std::vector<float> t = {0.0f, -0.0f, -1e-30f, -1e-7f, -0.5f, -0.3465736f, -0.6931472f,
                          -1.0f, -10.0f, -49.9f, -50.0f, -50.00001f, -51.0f, -87.0f, -103.0f,
                          -1e30f, -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-100.0f, 0.0f), narrow(-2.0f, 0.0f);
  for (int i = 0; i < 4000; ++i) t.push_back(i % 2 ? wide(rng) : narrow(rng));
  while (t.size() % 16) t.push_back(-0.25f);
  return t;
}

TEST(ExpPolyTest, WithinTwoUlpOfExpAboveTheCutoff) {
  for (float t : Arguments()) {
    if (t < exp_poly::kZeroBelow) continue;
    const double want = std::exp(static_cast<double>(t));
    const float got = ExpNonPositive(t);
    const float want_f = static_cast<float>(want);
    const double ulp = std::nextafter(want_f, std::numeric_limits<float>::infinity()) - want_f;
    EXPECT_LE(std::fabs(got - want), 2.0 * ulp) << "t = " << t;
  }
}

TEST(ExpPolyTest, ZeroBelowTheCutoff) {
  EXPECT_GT(ExpNonPositive(exp_poly::kZeroBelow), 1e-22f);
  EXPECT_EQ(ExpNonPositive(std::nextafter(exp_poly::kZeroBelow, -1000.0f)), 0.0f);
  EXPECT_EQ(ExpNonPositive(-1000.0f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(ExpNonPositive(std::nanf(""))));
}

#if defined(__x86_64__)
BLOSSOM_AVX2 void ExpAvx2(const float* t, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(out + i, ExpNonPositiveAvx2(_mm256_loadu_ps(t + i)));
}

BLOSSOM_AVX512 void ExpAvx512(const float* t, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(out + i, ExpNonPositiveAvx512(_mm512_loadu_ps(t + i)));
}

TEST(ExpPolyTest, VectorPathsAreBitIdenticalToScalar) {
  const std::vector<float> t = Arguments();
  std::vector<float> want(t.size());
  for (size_t i = 0; i < t.size(); ++i) want[i] = ExpNonPositive(t[i]);
  if (CpuHasAvx2Fma()) {
    std::vector<float> got(t.size());
    ExpAvx2(t.data(), got.data(), t.size());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), t.size() * sizeof(float)));
  }
  if (!CpuHasAvx512()) GTEST_SKIP() << "this CPU lacks AVX-512 (AVX2 checked where present)";
  std::vector<float> got(t.size());
  ExpAvx512(t.data(), got.data(), t.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), t.size() * sizeof(float)));
}

TEST(ExpPolyTest, VectorPathsKeepNaN) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU lacks AVX2/FMA";
  alignas(64) float t[16], out[16];
  for (int i = 0; i < 16; ++i) t[i] = i % 3 ? -1.0f : std::nanf("");
  ExpAvx2(t, out, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(std::isnan(out[i]), i % 3 == 0) << i;
  if (!CpuHasAvx512()) return;
  ExpAvx512(t, out, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(std::isnan(out[i]), i % 3 == 0) << i;
}
#endif

}  // namespace
}  // namespace blossom
