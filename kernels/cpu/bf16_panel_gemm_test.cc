#include "kernels/cpu/bf16_panel_gemm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/bf16_panel_tile.h"
#include "kernels/cpu/gemm_test_util.h"

namespace blossom {
namespace {

struct Packed {
  std::vector<uint16_t> panels;
  std::vector<float> w;  // row-major fp32, as given
};

Packed Pack(int64_t n, int64_t k, std::mt19937& rng) {
  Packed p;
  p.w = RandomNormal(n * k, rng);
  p.panels.resize(Bf16PanelStorageBytes(n, k) / 2);
  EXPECT_TRUE(PackBf16Panels(p.w.data(), DType::kF32, n, k, 0, n, p.panels.data()).ok());
  return p;
}

GemmArgs Args(const Packed& p, const std::vector<float>& bias, int64_t n, int64_t k, bool gelu) {
  GemmArgs args;
  args.w = p.panels.data();
  args.w_dtype = DType::kBF16Panel16;
  args.bias = bias.data();
  args.n = n;
  args.k = k;
  args.activation = gelu ? Activation::kBloomGelu : Activation::kNone;
  return args;
}

// Batch invariance: a row's result is bit-identical whatever the other rows (M picks the tiles:
// 1 x 8 panels for a single row, 8 and 4 x 3 panels, padded for 2-3 and 6-7 leftover rows), the
// thread count and the path. n = 37
// ends inside a panel; 200 rows span several column blocks and thread chunks.
TEST(Bf16PanelGemmTest, RowResultsIndependentOfBatchThreadsAndIsa) {
  std::mt19937 rng(42);
  for (const GemmShape s : {GemmShape{13, 37, 66}, GemmShape{13, 200, 1024}}) {
    Packed p = Pack(s.n, s.k, rng);
    std::vector<float> x = RandomNormal(s.m * s.k, rng), bias = RandomNormal(s.n, rng);
    ExpectBatchInvariant(&Bf16PanelGemmNT, Args(p, bias, s.n, s.k, true), x, s.m,
                         "n " + std::to_string(s.n));
  }
}

// Each output is the contract's dot (the portable tile on the rounded x) plus the bias, then the
// GELU: the GEMM adds nothing of its own, and writes exactly the n outputs of each row.
TEST(Bf16PanelGemmTest, OutputsAreTheTileDotsPlusBiasThenGelu) {
  std::mt19937 rng(9);
  const int64_t m = 9, n = 50, k = 130, n_pad = 64;
  Packed p = Pack(n, k, rng);
  std::vector<float> x = RandomNormal(m * k, rng), bias = RandomNormal(n, rng);
  std::vector<uint16_t> xb(m * k);
  RoundRowsToBf16Portable(x.data(), m * k, xb.data());
  std::vector<float> dots(m * n_pad);
  Bf16PanelTilePortable(xb.data(), k, static_cast<int>(m), p.panels.data(), n_pad / 16, k,
                        dots.data(), n_pad);
  for (bool gelu : {false, true}) {
    GemmArgs args = Args(p, bias, n, k, gelu);
    std::vector<float> out(m * n + 5, -7.0f);  // 5 guard values past the end
    args.x = x.data();
    args.out = out.data();
    args.m = m;
    ThreadPool pool(3);
    Bf16PanelGemmNT(args, &pool);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        float want = dots[r * n_pad + c] + bias[c];
        if (gelu) want = BloomGelu(want);
        ASSERT_EQ(out[r * n + c], want) << r << " " << c << " gelu " << gelu;
      }
    for (int64_t i = m * n; i < m * n + 5; ++i) EXPECT_EQ(out[i], -7.0f);
  }
}

// Against the fp32-activation GEMM on the same bf16 weights: the difference is what rounding x to
// bf16 costs, at most 2^-9 sum |x w| (relative rounding error of each x), plus fp32 sums.
TEST(Bf16PanelGemmTest, StaysWithinTheBf16RoundingOfXOfTheFp32Gemm) {
  std::mt19937 rng(17);
  const int64_t m = 5, n = 48, k = 1024;
  Packed p = Pack(n, k, rng);
  std::vector<uint16_t> w_bf16(n * k);
  UnpackBf16PanelRows(p.panels.data(), k, 0, n, w_bf16.data());
  std::vector<float> x = RandomNormal(m * k, rng), none;
  std::vector<float> got(m * n), want(m * n);
  GemmArgs args = Args(p, none, n, k, false);
  args.bias = nullptr;
  args.x = x.data();
  args.m = m;
  args.out = got.data();
  Bf16PanelGemmNT(args, nullptr);
  args.w = w_bf16.data();
  args.w_dtype = DType::kBF16;
  args.out = want.data();
  GemmNT(args, nullptr);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double magnitude = 0;
      for (int64_t i = 0; i < k; ++i)
        magnitude += std::fabs(double(x[r * k + i]) * BF16ToFloat(w_bf16[c * k + i]));
      const float g = got[r * n + c], w = want[r * n + c];
      ASSERT_TRUE(std::isfinite(g)) << r << " " << c;
      EXPECT_LE(std::fabs(g - w), std::ldexp(1.0, -9) * magnitude * 1.01) << r << " " << c;
      EXPECT_NE(g, w) << "rounding x to bf16 left output " << r << ", " << c << " unchanged";
    }
}

}  // namespace
}  // namespace blossom
