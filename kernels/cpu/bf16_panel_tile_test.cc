#include "kernels/cpu/bf16_panel_tile.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/dtype.h"

namespace blossom {
namespace {

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

float FromBits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

// Random normal values with the cases the contract names: zeros of both signs, subnormals (to be
// flushed), values that round up across a binade or to the largest finite bf16, and large ones.
std::vector<float> Values(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  const float specials[] = {0.0f, -0.0f, FLT_MIN / 4, -FLT_MIN / 3, 1.00390625f /* halfway */,
                            1.01171875f, 30.0f, -25.0f, FromBits(0x3f7fffff)};
  for (size_t i = 0; i < n && i < 200; i += 7) v[i] = specials[(i / 7) % std::size(specials)];
  return v;
}

struct Operands {
  std::vector<uint16_t> x;   // rows x k, rounded
  std::vector<uint16_t> w;   // panels, packed
  std::vector<float> w_f32;  // the weights as given (row-major)
};

Operands Make(int rows, int64_t n, int64_t k, std::mt19937& rng) {
  Operands ops;
  std::vector<float> xf = Values(rows * k, rng, 2.0f);
  ops.w_f32 = Values(n * k, rng, 0.05f);
  ops.x.resize(xf.size());
  RoundRowsToBf16(xf.data(), static_cast<int64_t>(xf.size()), ops.x.data());
  ops.w.resize(Bf16PanelStorageBytes(n, k) / 2, 0xffff);
  EXPECT_TRUE(PackBf16Panels(ops.w_f32.data(), DType::kF32, n, k, 0, n, ops.w.data()).ok());
  return ops;
}

TEST(Bf16PanelTest, RoundingIsNearestEvenWithSubnormalsFlushed) {
  const float cases[] = {1.0f, 1.00390625f, 1.01171875f, -3.5f, FLT_MIN, FLT_MIN / 2, -FLT_MIN / 8,
                         FLT_MAX, std::numeric_limits<float>::infinity(), 0.0f, -0.0f};
  const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0xc060, 0x0080, 0x0000, 0x8000,
                           0x7f80, 0x7f80, 0x0000, 0x8000};
  uint16_t got[std::size(cases)];
  RoundRowsToBf16Portable(cases, std::size(cases), got);
  for (size_t i = 0; i < std::size(cases); ++i) EXPECT_EQ(got[i], want[i]) << cases[i];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  RoundRowsToBf16Portable(&nan, 1, got);
  EXPECT_TRUE(std::isnan(BF16ToFloat(got[0])));
}

// The vector rounding (where the CPU has AVX-512) gives the portable rounding's bits on every
// float class, at lengths with and without a remainder.
TEST(Bf16PanelTest, VectorRoundingMatchesPortable) {
  std::mt19937 rng(3);
  std::vector<float> x = Values(1000, rng, 100.0f);
  std::uniform_int_distribution<uint32_t> any;
  for (size_t i = 500; i < x.size(); ++i) x[i] = FromBits(any(rng));  // NaNs, infs, subnormals
  for (const int64_t n : {int64_t{1000}, int64_t{997}, int64_t{16}, int64_t{5}}) {
    std::vector<uint16_t> portable(n), dispatched(n);
    RoundRowsToBf16Portable(x.data(), n, portable.data());
    RoundRowsToBf16(x.data(), n, dispatched.data());
    EXPECT_EQ(portable, dispatched) << "n " << n;
  }
}

TEST(Bf16PanelTest, PackingPlacesPairsOfSixteenRowsAndPadsWithZeros) {
  std::mt19937 rng(5);
  const int64_t n = 37, k = 6;
  Operands ops = Make(1, n, k, rng);
  std::vector<uint16_t> rows(n * k);
  UnpackBf16PanelRows(ops.w.data(), k, 0, n, rows.data());
  for (int64_t i = 0; i < n * k; ++i) {
    uint16_t want = FloatToBF16(ops.w_f32[i]);
    if ((want & 0x7f80) == 0) want &= 0x8000;
    ASSERT_EQ(rows[i], want) << i;
  }
  // Row 16 + 5's element 3: panel 1, pair 1, second element.
  EXPECT_EQ(ops.w[16 * k + 1 * 32 + 5 * 2 + 1], rows[(16 + 5) * k + 3]);
  EXPECT_EQ(Bf16PanelIndex(16 + 5, 3, k), 16 * k + 1 * 32 + 5 * 2 + 1);
  // Rows 37 .. 47 of the last panel are padding.
  for (int64_t row = n; row < 48; ++row)
    for (int64_t i = 0; i < k; ++i) ASSERT_EQ(ops.w[Bf16PanelIndex(row, i, k)], 0) << row;
}

TEST(Bf16PanelTest, PackingRefusesRangesOffPanelsAndOddRows) {
  std::vector<float> w(32 * 4, 1.0f);
  std::vector<uint16_t> out(Bf16PanelStorageBytes(32, 4) / 2);
  EXPECT_EQ(PackBf16Panels(w.data(), DType::kF32, 32, 4, 8, 16, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackBf16Panels(w.data(), DType::kF32, 32, 3, 0, 16, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackBf16Panels(w.data(), DType::kI32, 32, 4, 0, 16, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(PackBf16Panels(w.data(), DType::kF32, 32, 4, 16, 32, out.data()).ok());
}

// The portable tile against an fp64 dot of the same bf16 values: the products are exact, so the
// only error is the k fp32 additions, at most (k u / (1 - k u)) sum |x w| (u = 2^-24), and the
// subnormal flushes, which cannot matter at these magnitudes.
TEST(Bf16PanelTest, PortableTileIsTheFp32SumOfExactProducts) {
  std::mt19937 rng(7);
  for (const int64_t k : {int64_t{2}, int64_t{64}, int64_t{1030}}) {
    const int rows = 3, panels = 2;
    const int64_t n = panels * kBf16PanelRows;
    Operands ops = Make(rows, n, k, rng);
    std::vector<uint16_t> w_rows(n * k);
    UnpackBf16PanelRows(ops.w.data(), k, 0, n, w_rows.data());
    std::vector<float> dots(rows * n, NAN);
    Bf16PanelTilePortable(ops.x.data(), k, rows, ops.w.data(), panels, k, dots.data(), n);
    const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
    for (int r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double exact = 0, magnitude = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = double(BF16ToFloat(ops.x[r * k + i])) * BF16ToFloat(w_rows[c * k + i]);
          exact += p;
          magnitude += std::fabs(p);
        }
        const float got = dots[r * n + c];
        ASSERT_TRUE(std::isfinite(got)) << r << " " << c;
        ASSERT_LE(std::fabs(got - exact), gamma * magnitude + 1e-30) << "k " << k << " " << r << " " << c;
      }
  }
}

// The definition is the instruction's: the AVX512-BF16 tile gives the portable tile's bits for
// every row count, panel count (groups and the rest) and length, on this CPU.
TEST(Bf16PanelTest, Avx512Bf16TileGivesThePortableBits) {
  if (!Bf16PanelTileAvx512Usable()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(11);
  for (const int64_t k : {int64_t{2}, int64_t{34}, int64_t{512}}) {
    for (int rows = 1; rows <= 8; ++rows) {
      for (const int panels : {1, 2, 3, 4, 6, 7, 8}) {
        const int64_t n = panels * kBf16PanelRows;
        Operands ops = Make(rows, n, k, rng);
        std::vector<float> want(rows * n, NAN), got(rows * n, NAN);
        Bf16PanelTilePortable(ops.x.data(), k, rows, ops.w.data(), panels, k, want.data(), n);
        Bf16PanelTileAvx512(ops.x.data(), k, rows, ops.w.data(), panels, k, got.data(), n);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(Bits(got[i]), Bits(want[i]))
              << "k " << k << " rows " << rows << " panels " << panels << " at " << i << ": "
              << got[i] << " vs " << want[i];
      }
    }
  }
}

// Sums that pass through the subnormal range flush to zero on both paths (the FTZ of the
// definition): tiny products whose sum would be subnormal give a signed zero.
TEST(Bf16PanelTest, SubnormalSumsFlushOnEveryPath) {
  const int64_t k = 2;
  const int64_t n = kBf16PanelRows;
  // x = 2^-70 and w = 2^-70: the product 2^-140 is subnormal in fp32, so the sum flushes to 0.
  std::vector<float> xf = {std::ldexp(1.0f, -70), std::ldexp(1.0f, -70)};
  std::vector<float> wf(n * k, std::ldexp(1.0f, -70));
  std::vector<uint16_t> x(k), w(Bf16PanelStorageBytes(n, k) / 2);
  RoundRowsToBf16(xf.data(), k, x.data());
  ASSERT_TRUE(PackBf16Panels(wf.data(), DType::kF32, n, k, 0, n, w.data()).ok());
  std::vector<float> dots(n, NAN);
  Bf16PanelTilePortable(x.data(), k, 1, w.data(), 1, k, dots.data(), n);
  for (float d : dots) EXPECT_EQ(Bits(d), 0u);
  if (Bf16PanelTileAvx512Usable()) {
    std::fill(dots.begin(), dots.end(), NAN);
    Bf16PanelTileAvx512(x.data(), k, 1, w.data(), 1, k, dots.data(), n);
    for (float d : dots) EXPECT_EQ(Bits(d), 0u);
  }
}

}  // namespace
}  // namespace blossom
