#include "kernels/cpu/vector_ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/dtype.h"

namespace blossom {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(VectorOpsTest, DotMatchesDouble) {
  for (int64_t n : {0, 1, 7, 8, 9, 64, 80, 129}) {
    std::vector<float> a = Random(n, 1 + n), b = Random(n, 2 + n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(a[i]) * b[i];
      mag += std::fabs(double(a[i]) * b[i]);
    }
    EXPECT_NEAR(DotF32(a.data(), b.data(), n, false), ref, 1e-6 * mag + 1e-7) << n;
  }
}

TEST(VectorOpsTest, AxpyIsFma) {
  std::vector<float> x = Random(37, 3), y = Random(37, 4), want = y;
  for (size_t i = 0; i < x.size(); ++i) want[i] = std::fma(0.3f, x[i], want[i]);
  AxpyF32(0.3f, x.data(), y.data(), 37, false);
  EXPECT_EQ(0, std::memcmp(want.data(), y.data(), y.size() * sizeof(float)));
}

// Bitwise equality of two float vectors (memcmp would be handed an empty vector's null data).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(VectorOpsTest, Avx2IsBitIdenticalToPortable) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU lacks AVX2/FMA";
  for (int64_t n : {0, 1, 7, 8, 9, 64, 80, 129}) {
    std::vector<float> a = Random(n, 5 + n), b = Random(n, 6 + n);
    const float p = DotF32(a.data(), b.data(), n, false), v = DotF32(a.data(), b.data(), n, true);
    EXPECT_EQ(0, std::memcmp(&p, &v, sizeof(float))) << n;
    std::vector<float> y1 = b, y2 = b;
    AxpyF32(-1.7f, a.data(), y1.data(), n, false);
    AxpyF32(-1.7f, a.data(), y2.data(), n, true);
    EXPECT_TRUE(SameBits(y1, y2)) << n;
  }
}

// The row-batched calls attention uses must give exactly the bits of one call per row, on both
// paths, for every d (multiples of 8 take the batched AVX2 code; others fall back) and every
// row count (4 at a time, then single rows).
TEST(VectorOpsTest, RowCallsMatchOneCallPerRow) {
  const bool paths[] = {false, true};
  for (bool avx2 : paths) {
    if (avx2 && !CpuHasAvx2Fma()) continue;
    for (int64_t d : {8, 64, 72, 128, 136, 5, 0}) {
      for (int64_t n : {0, 1, 3, 4, 5, 9, 33}) {
        std::vector<float> q = Random(d, 7 + d), y0 = Random(d, 8 + d), weights = Random(n, 9 + n);
        std::vector<std::vector<float>> rows;
        std::vector<const float*> ptrs;
        for (int64_t j = 0; j < n; ++j) rows.push_back(Random(d, 100 + 13 * j + d));
        for (const auto& r : rows) ptrs.push_back(r.data());
        std::vector<float> dots(n), want_dots(n);
        DotRowsF32(q.data(), ptrs.data(), n, d, dots.data(), avx2);
        for (int64_t j = 0; j < n; ++j) want_dots[j] = DotF32(q.data(), ptrs[j], d, avx2);
        EXPECT_TRUE(SameBits(dots, want_dots)) << "dots d=" << d << " n=" << n << " avx2=" << avx2;
        std::vector<float> y = y0, want_y = y0;
        AxpyRowsF32(weights.data(), ptrs.data(), n, d, y.data(), avx2);
        for (int64_t j = 0; j < n; ++j) AxpyF32(weights[j], ptrs[j], want_y.data(), d, avx2);
        EXPECT_TRUE(SameBits(y, want_y)) << "axpy d=" << d << " n=" << n << " avx2=" << avx2;
        // The same rows as bf16 bits (a bf16 KV cache): the bits of fp32 rows of the same values.
        std::vector<std::vector<uint16_t>> bf16_rows(n);
        std::vector<const uint16_t*> bf16_ptrs;
        std::vector<const float*> rounded_ptrs;
        std::vector<std::vector<float>> rounded(n);
        for (int64_t j = 0; j < n; ++j) {
          bf16_rows[j].resize(d);
          rounded[j].resize(d);
          ConvertFromF32(rows[j].data(), bf16_rows[j].data(), DType::kBF16, d);
          ConvertToF32(bf16_rows[j].data(), DType::kBF16, rounded[j].data(), d);
          bf16_ptrs.push_back(bf16_rows[j].data());
          rounded_ptrs.push_back(rounded[j].data());
        }
        DotRowsBf16(q.data(), bf16_ptrs.data(), n, d, dots.data(), avx2);
        DotRowsF32(q.data(), rounded_ptrs.data(), n, d, want_dots.data(), avx2);
        EXPECT_TRUE(SameBits(dots, want_dots)) << "bf16 dots d=" << d << " n=" << n << " avx2=" << avx2;
        y = y0;
        want_y = y0;
        AxpyRowsBf16(weights.data(), bf16_ptrs.data(), n, d, y.data(), avx2);
        AxpyRowsF32(weights.data(), rounded_ptrs.data(), n, d, want_y.data(), avx2);
        EXPECT_TRUE(SameBits(y, want_y)) << "bf16 axpy d=" << d << " n=" << n << " avx2=" << avx2;
      }
    }
  }
}

}  // namespace
}  // namespace blossom
