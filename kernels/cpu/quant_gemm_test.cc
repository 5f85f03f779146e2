#include "kernels/cpu/quant_gemm.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_test_util.h"
#include "kernels/cpu/quant.h"

namespace blossom {
namespace {

class QuantGemmShapes : public ::testing::TestWithParam<GemmShape> {};

// Against a double-precision reference over the dequantized weights and the unquantized x: the
// gap is the activation quantization, each x within half a step (max|x| / 254 of its block), so
// |error| <= sum |w| * step / 2, which for unit normals is a few 1e-3 * sqrt(k) at most.
TEST_P(QuantGemmShapes, MatchesDequantizedReference) {
  const GemmShape s = GetParam();
  std::mt19937 rng(s.m * 1000 + s.n * 10 + s.k);
  std::vector<float> x = RandomNormal(s.m * s.k, rng), w = RandomNormal(s.n * s.k, rng),
                     bias = RandomNormal(s.n, rng);
  ThreadPool pool(3);
  for (DType dtype : {DType::kQ8G32, DType::kQ4G32}) {
    const size_t row_bytes = DTypeBytes(dtype, s.k);
    std::vector<char> packed(row_bytes * s.n);
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, s.n, s.k, dtype, packed.data()).ok());
    for (bool gelu : {false, true}) {
      std::vector<float> out(s.m * s.n, -7.0f);
      GemmArgs args;
      args.x = x.data();
      args.w = packed.data();
      args.w_dtype = dtype;
      args.bias = bias.data();
      args.out = out.data();
      args.m = s.m;
      args.n = s.n;
      args.k = s.k;
      args.activation = gelu ? Activation::kBloomGelu : Activation::kNone;
      QuantGemmNT(args, &pool);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          double acc = 0, bound = 0;
          for (int64_t p = 0; p < s.k; ++p) {
            const double wq = DequantizeAt(packed.data() + j * row_bytes, dtype, p);
            acc += double(x[i * s.k + p]) * wq;
            float amax = 0;
            const int64_t b0 = p / kQuantBlock * kQuantBlock;
            for (int q = 0; q < kQuantBlock; ++q) amax = std::max(amax, std::fabs(x[i * s.k + b0 + q]));
            bound += std::fabs(wq) * amax / 254.0;
          }
          float ref = static_cast<float>(acc) + bias[j];
          if (gelu) ref = BloomGelu(ref);
          // GELU's slope is at most ~1.13, so the same bound (plus fp32 rounding) holds after it.
          ASSERT_NEAR(out[i * s.n + j], ref, 1.2 * bound + 1e-4 * (1 + std::fabs(ref)))
              << DTypeName(dtype) << " gelu " << gelu << " row " << i << " col " << j;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantGemmShapes,
                         ::testing::Values(GemmShape{1, 1, 32}, GemmShape{1, 9, 64},
                                           GemmShape{3, 5, 96}, GemmShape{4, 4, 32},
                                           GemmShape{5, 11, 128}, GemmShape{17, 31, 256},
                                           GemmShape{2, 250, 64}));

// Batch invariance as in gemm_test: a row's result is bit-identical whatever the batch (M picks
// the tiles: 1x4 below 4 rows, 4x2 from 4, with AMX 16x16 from 4 (M padded to 16) and 32x16
// from 17), the thread count and the instruction-set path. The reference is each row alone,
// single-threaded, on the portable path. M runs to 37 so AMX CPUs cover a 32-row tile with a
// 16-row one after it, and N = 37 leaves weight rows after two 16-column tiles.
TEST(QuantGemmTest, RowResultsIndependentOfBatchThreadsAndIsa) {
  std::mt19937 rng(42);
  const int64_t n = 37, k = 224, max_m = 37;
  std::vector<float> w = RandomNormal(n * k, rng), big_x = RandomNormal(max_m * k, rng), bias = RandomNormal(n, rng);
  for (DType dtype : {DType::kQ8G32, DType::kQ4G32}) {
    std::vector<char> packed(DTypeBytes(dtype, k) * n);
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, dtype, packed.data()).ok());
    GemmArgs args;
    args.w = packed.data();
    args.w_dtype = dtype;
    args.bias = bias.data();
    args.n = n;
    args.k = k;
    args.activation = Activation::kBloomGelu;
    ExpectBatchInvariant(&QuantGemmNT, args, big_x, max_m, DTypeName(dtype));
  }
}

// A NaN in an input row makes that output row NaN on every path (1x4 tiles, 4- and 8-row
// tiles, panels, AMX where the CPU has it), as the fp32 GEMM does, so the sampler refuses the
// logits; the other rows are untouched.
TEST(QuantGemmTest, ANanInputRowGivesANanOutputRow) {
  std::mt19937 rng(47);
  const int64_t n = 48, k = 128;
  std::vector<float> w = RandomNormal(n * k, rng), bias = RandomNormal(n, rng);
  ThreadPool pool(3);
  for (DType dtype : {DType::kQ8G32, DType::kQ4G32, DType::kQ8G32Panel16, DType::kQ4G32Panel16}) {
    std::vector<char> packed(DTypeBytes(dtype, k) * n);
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, dtype, packed.data()).ok());
    for (int64_t m : {1, 5, 17}) {
      std::vector<float> x = RandomNormal(m * k, rng), out(m * n);
      const int64_t bad_row = m / 2;
      x[bad_row * k + 70] = std::numeric_limits<float>::quiet_NaN();
      GemmArgs args;
      args.x = x.data();
      args.w = packed.data();
      args.w_dtype = dtype;
      args.bias = bias.data();
      args.out = out.data();
      args.m = m;
      args.n = n;
      args.k = k;
      QuantGemmNT(args, &pool);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_EQ(std::isnan(out[i * n + j]), i == bad_row)
              << DTypeName(dtype) << " m " << m << " row " << i << " col " << j;
        }
      }
    }
  }
}

// Panel-packed int8 and int4 weights (kQ8G32Panel16, kQ4G32Panel16) give the row-major weights'
// bits: for every M to 37 (8-row tiles, a 4-row one, single rows), 1 and 4 threads and every
// instruction-set path (each against the row-major output alone, single-threaded, portable), so
// the panel path is batch-invariant too. N = 48: three panels.
TEST(QuantGemmTest, PanelWeightsGiveTheRowMajorBits) {
  std::mt19937 rng(43);
  const int64_t n = 48, k = 224, max_m = 37;
  std::vector<float> w = RandomNormal(n * k, rng), big_x = RandomNormal(max_m * k, rng), bias = RandomNormal(n, rng);
  for (const auto [row_dtype, panel_dtype] : {std::pair{DType::kQ8G32, DType::kQ8G32Panel16},
                                              std::pair{DType::kQ4G32, DType::kQ4G32Panel16}}) {
    std::vector<char> rows(DTypeBytes(row_dtype, k) * n), panels(DTypeBytes(panel_dtype, k) * n);
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, row_dtype, rows.data()).ok());
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, panel_dtype, panels.data()).ok());
    GemmArgs args;
    args.bias = bias.data();
    args.n = n;
    args.k = k;
    args.activation = Activation::kBloomGelu;
    ThreadPool pool1(1);
    std::vector<float> want(max_m * n);
    args.w = rows.data();
    args.w_dtype = row_dtype;
    for (int64_t row = 0; row < max_m; ++row) {
      args.x = big_x.data() + row * k;
      args.out = want.data() + row * n;
      args.m = 1;
      QuantGemmNT(args, &pool1, GemmIsa::kPortable);
    }
    args.w = panels.data();
    args.w_dtype = panel_dtype;
    ExpectBatchInvariant(&QuantGemmNT, args, big_x, max_m, DTypeName(panel_dtype));
    std::vector<float> got(max_m * n);
    args.x = big_x.data();
    args.out = got.data();
    args.m = max_m;
    ThreadPool pool4(4);
    QuantGemmNT(args, &pool4);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float))) << DTypeName(panel_dtype);
  }
}

}  // namespace
}  // namespace blossom
