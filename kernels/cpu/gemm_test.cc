#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_test_util.h"
#include "kernels/cpu/tiled_gemm.h"
#include "kernels/cpu/weight_pairs.h"

namespace blossom {
namespace {

// Naive reference in double.
std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>* bias, int64_t m, int64_t n, int64_t k,
                             bool gelu) {
  std::vector<float> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * w[j * k + p];
      float v = static_cast<float>(acc) + (bias ? (*bias)[j] : 0.0f);
      out[i * n + j] = gelu ? BloomGelu(v) : v;
    }
  return out;
}

class GemmShapes : public ::testing::TestWithParam<GemmShape> {};

// Tolerance: fp32 accumulation over K terms of unit-variance products: ~1e-6 * sqrt(K) relative.
TEST_P(GemmShapes, MatchesReferenceForEveryWeightDtype) {
  const GemmShape s = GetParam();
  std::mt19937 rng(s.m * 1000 + s.n * 10 + s.k);
  std::vector<float> x = RandomNormal(s.m * s.k, rng), w = RandomNormal(s.n * s.k, rng),
                     bias = RandomNormal(s.n, rng);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    // Round weights to the dtype first so the reference sees the same values.
    std::vector<uint16_t> half(w.size());
    std::vector<float> w_rounded(w.size());
    const void* w_ptr = w.data();
    if (dtype != DType::kF32) {
      ConvertFromF32(w.data(), half.data(), dtype, w.size());
      ConvertToF32(half.data(), dtype, w_rounded.data(), w.size());
      w_ptr = half.data();
    } else {
      w_rounded = w;
    }
    for (bool gelu : {false, true}) {
      std::vector<float> out(s.m * s.n, -7.0f);
      GemmArgs args;
      args.x = x.data();
      args.w = w_ptr;
      args.w_dtype = dtype;
      args.bias = bias.data();
      args.out = out.data();
      args.m = s.m;
      args.n = s.n;
      args.k = s.k;
      args.activation = gelu ? Activation::kBloomGelu : Activation::kNone;
      ThreadPool pool(3);
      GemmNT(args, &pool);
      std::vector<float> ref = Reference(x, w_rounded, &bias, s.m, s.n, s.k, gelu);
      const float tol = 1e-5f * std::sqrt(static_cast<float>(s.k)) + 1e-6f;
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], ref[i], tol * (1.0f + std::fabs(ref[i])))
            << "dtype " << DTypeName(dtype) << " gelu " << gelu << " index " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmShapes,
                         ::testing::Values(GemmShape{1, 1, 1}, GemmShape{1, 4, 8},
                                           GemmShape{3, 5, 7}, GemmShape{4, 4, 16},
                                           GemmShape{5, 9, 33}, GemmShape{17, 31, 64},
                                           GemmShape{2, 250, 96}, GemmShape{33, 65, 257},
                                           GemmShape{6, 19, 1000}));

// Batch invariance: a row's result is bit-identical whatever the other rows (M picks the tile
// shapes: 1x8 for a single row, 8- and 4-row tiles, padded ones for 2-3 and 6-7 leftover rows),
// the thread count and the instruction-set path. The reference is each row alone,
// single-threaded, on the portable path.
TEST(GemmTest, RowResultsIndependentOfBatchThreadsAndIsa) {
  std::mt19937 rng(42);
  const int64_t n = 37, k = 203, max_m = 13;
  std::vector<float> w = RandomNormal(n * k, rng), big_x = RandomNormal(max_m * k, rng), bias = RandomNormal(n, rng);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> half(w.size());
    ConvertFromF32(w.data(), half.data(), dtype == DType::kF32 ? DType::kBF16 : dtype, w.size());
    GemmArgs args;
    args.w = dtype == DType::kF32 ? static_cast<const void*>(w.data()) : half.data();
    args.w_dtype = dtype;
    args.bias = bias.data();
    args.n = n;
    args.k = k;
    args.activation = Activation::kBloomGelu;
    ExpectBatchInvariant(&GemmNT, args, big_x, max_m, DTypeName(dtype));
  }
}

// Row-paired weights (weight_pairs.h) hold the same elements in another order: every path, at
// every batch size (the 1-row decode tiles and the 4- and 8-row ones), odd last rows and
// k across the contract's 1024-element blocks, must give the row-major weights' bits.
TEST(GemmTest, RowPairedWeightsGiveTheRowMajorBitsOnEveryPath) {
  std::mt19937 rng(7);
  const GemmShape shapes[] = {{1, 1, 8},  {3, 5, 16},  {4, 7, 64},    {9, 13, 1032},
                              {17, 50, 2056}, {8, 97, 1024}, {13, 6, 24}, {2, 12, 8}};
  for (const GemmShape& s : shapes) {
    std::vector<float> x = RandomNormal(s.m * s.k, rng), w = RandomNormal(s.n * s.k, rng),
                       bias = RandomNormal(s.n, rng);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      std::vector<uint16_t> half(w.size());
      const void* rows = w.data();
      if (dtype != DType::kF32) {
        ConvertFromF32(w.data(), half.data(), dtype, w.size());
        rows = half.data();
      }
      std::vector<char> packed(DTypeBytes(dtype, s.n * s.k));
      PackPairRows(rows, dtype, s.n, s.k, 0, s.n, packed.data());
      for (int64_t m = 1; m <= s.m; ++m) {
        GemmArgs args;
        args.x = x.data();
        args.bias = bias.data();
        args.m = m;
        args.n = s.n;
        args.k = s.k;
        args.activation = Activation::kBloomGelu;
        std::vector<float> want(m * s.n), got(m * s.n);
        args.w = rows;
        args.w_dtype = dtype;
        args.out = want.data();
        GemmNT(args, nullptr, GemmIsa::kPortable);
        args.w = packed.data();
        args.w_dtype = PairsOf(dtype);
        for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
          if (!GemmIsaSupported(isa)) continue;
          for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            std::fill(got.begin(), got.end(), -7.0f);
            args.out = got.data();
            GemmNT(args, &pool, isa);
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_TRUE(std::isfinite(got[i]));
              ASSERT_EQ(got[i], want[i])
                  << DTypeName(dtype) << " " << GemmIsaName(isa) << " m " << m << " n " << s.n
                  << " k " << s.k << " threads " << threads << " index " << i;
            }
          }
        }
      }
    }
  }
}

TEST(GemmTest, BestPathIsTheWidestThisCpuRuns) {
  if (!GemmIsaSupported(GemmIsa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  EXPECT_EQ(BestGemmIsa(), GemmIsaSupported(GemmIsa::kAvx512) ? GemmIsa::kAvx512 : GemmIsa::kAvx2);
}

TEST(GemmTest, BloomGeluMatchesFormula) {
  for (float x : {-3.0f, -0.5f, 0.0f, 0.1f, 2.0f}) {
    double ref = x * 0.5 * (1.0 + std::tanh(0.79788456 * x * (1 + 0.044715 * x * x)));
    EXPECT_NEAR(BloomGelu(x), ref, 1e-6);
  }
}

}  // namespace
}  // namespace blossom

namespace blossom {
namespace {

// The multi-row tiles RunTiledGemm runs for m rows, as "m0:rows/valid" and the first single row.
std::string PlanOf(const GemmTiling& t, int64_t m) {
  const TileRowPlan plan(t, m);
  std::string out;
  for (int64_t i = 0; i < plan.full_big_tiles; ++i) {
    out += std::to_string(i * t.prefill_rows) + ":" + std::to_string(t.prefill_rows) + " ";
  }
  for (int i = 0; i < plan.num_tiles; ++i) {
    out += std::to_string(plan.tiles[i].m0) + ":" + std::to_string(plan.tiles[i].rows) + "/" +
           std::to_string(plan.tiles[i].valid) + " ";
  }
  return out + "single " + std::to_string(plan.single_rows_from) + " read " +
         std::to_string(plan.rows_read);
}

TEST(TiledGemmTest, LeftoverRowsRunAsOnePaddedTile) {
  GemmTiling t;
  t.prefill_rows = 8;
  t.prefill_rows_small = 4;
  EXPECT_EQ(PlanOf(t, 1), "single 0 read 1");
  EXPECT_EQ(PlanOf(t, 3), "single 0 read 3");  // without padding: 3 single rows
  EXPECT_EQ(PlanOf(t, 7), "0:4/4 single 4 read 7");
  EXPECT_EQ(PlanOf(t, 17), "0:8 8:8 single 16 read 17");
  t.pad_rows = true;
  EXPECT_EQ(PlanOf(t, 1), "single 0 read 1");
  EXPECT_EQ(PlanOf(t, 2), "0:4/2 single 2 read 4");
  EXPECT_EQ(PlanOf(t, 3), "0:4/3 single 3 read 4");
  EXPECT_EQ(PlanOf(t, 4), "0:4/4 single 4 read 4");
  EXPECT_EQ(PlanOf(t, 5), "0:4/4 single 4 read 5");  // a padded 8-row tile would cost more
  EXPECT_EQ(PlanOf(t, 6), "0:8/6 single 6 read 8");
  EXPECT_EQ(PlanOf(t, 7), "0:8/7 single 7 read 8");
  EXPECT_EQ(PlanOf(t, 8), "0:8 single 8 read 8");
  EXPECT_EQ(PlanOf(t, 11), "0:8 8:4/3 single 11 read 12");
  EXPECT_EQ(PlanOf(t, 13), "0:8 8:4/4 single 12 read 13");
  EXPECT_EQ(TiledGemmRowsRead(t, 14), 16);
  // One tile size (the AVX2 path): 2-3 leftover rows pad to it.
  t.prefill_rows = 4;
  t.prefill_rows_small = 0;
  EXPECT_EQ(PlanOf(t, 2), "0:4/2 single 2 read 4");
  EXPECT_EQ(PlanOf(t, 5), "0:4 single 4 read 5");
  EXPECT_EQ(PlanOf(t, 7), "0:4 4:4/3 single 7 read 8");
}

}  // namespace
}  // namespace blossom
