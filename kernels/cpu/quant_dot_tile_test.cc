#include "kernels/cpu/quant_dot_tile.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace blossom {
namespace {

// Quantized x rows and weight rows of random normal values, with a few zeros and extremes so
// the sign trick (|w| * sign(x, w)) meets w == 0, x == 0 and the largest codes.
struct Operands {
  std::vector<Q8Block> x;
  std::vector<char> w;
};

Operands Make(int rows, int cols, int64_t k, DType w_dtype, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> xf(rows * k), wf(cols * k);
  for (float& v : xf) v = dist(rng);
  for (float& v : wf) v = dist(rng);
  xf[0] = 0.0f;
  wf[1] = 0.0f;
  wf[2] = -40.0f;
  Operands ops;
  ops.x.resize(rows * k / kQuantBlock);
  for (int r = 0; r < rows; ++r)
    QuantizeActivationRow(xf.data() + r * k, k, ops.x.data() + r * k / kQuantBlock);
  ops.w.resize(DTypeBytes(w_dtype, k) * cols);
  EXPECT_TRUE(QuantizeWeightRows(wf.data(), DType::kF32, cols, k, w_dtype, ops.w.data()).ok());
  return ops;
}

// The portable path against the contract written out with the dequantized codes.
TEST(QuantDotTileTest, PortableFollowsTheContract) {
  std::mt19937 rng(11);
  const int64_t k = 160;
  for (DType dtype : {DType::kQ8G32, DType::kQ4G32}) {
    Operands ops = Make(1, 1, k, dtype, rng);
    float dot = 0;
    QuantDotTilePortable(ops.x.data(), k / kQuantBlock, 1, ops.w.data(), dtype, 1, k, &dot, 1);
    double exact = 0;
    for (int64_t i = 0; i < k; ++i) {
      const Q8Block& xb = ops.x[i / kQuantBlock];
      exact += double(xb.scale) * xb.codes[i % kQuantBlock] * DequantizeAt(ops.w.data(), dtype, i);
    }
    EXPECT_NEAR(dot, exact, 1e-5 * (1 + std::fabs(exact))) << DTypeName(dtype);
  }
}

// Every tile shape of `path` against the portable path, bit for bit.
void ExpectMatchesPortable(QuantDotTileFn path, const char* name) {
  std::mt19937 rng(5);
  for (DType dtype : {DType::kQ8G32, DType::kQ4G32}) {
    for (const QuantTileShape shape : kQuantTileShapes) {
      for (int64_t k : {32, 64, 1024}) {
        Operands ops = Make(shape.rows, shape.cols, k, dtype, rng);
        float portable[kQuantMaxTileRows * kQuantMaxTileCols] = {};
        float vec[kQuantMaxTileRows * kQuantMaxTileCols] = {};
        const int64_t ldx = k / kQuantBlock;
        QuantDotTilePortable(ops.x.data(), ldx, shape.rows, ops.w.data(), dtype, shape.cols, k,
                             portable, kQuantMaxTileCols);
        path(ops.x.data(), ldx, shape.rows, ops.w.data(), dtype, shape.cols, k, vec,
             kQuantMaxTileCols);
        EXPECT_EQ(0, std::memcmp(portable, vec, sizeof(portable)))
            << name << " " << DTypeName(dtype) << " tile " << shape.rows << "x" << shape.cols
            << " k " << k;
        for (int i = 0; i < shape.rows * kQuantMaxTileCols; ++i) ASSERT_TRUE(std::isfinite(vec[i]));
      }
    }
  }
}

TEST(QuantDotTileTest, Avx2MatchesPortableBitForBitOnEveryTileShape) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C: only the portable path runs";
  ExpectMatchesPortable(&QuantDotTileAvx2, "avx2");
}

TEST(QuantDotTileTest, AvxVnniMatchesPortableBitForBitOnEveryTileShape) {
  if (!CpuHasAvxVnni()) GTEST_SKIP() << "this CPU lacks AVX-VNNI: that path cannot run here";
  ExpectMatchesPortable(&QuantDotTileAvxVnni, "avx-vnni");
}

TEST(QuantDotTileTest, Avx512VnniMatchesPortableBitForBitOnEveryTileShape) {
  if (!CpuHasAvx512Vnni()) {
    GTEST_SKIP() << "this CPU lacks AVX512-VNNI with AVX512VL: that path cannot run here";
  }
  ExpectMatchesPortable(&QuantDotTileAvx512Vnni, "avx512-vnni");
}

TEST(QuantDotTileTest, BestX86PathIsOneThisCpuRuns) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C: only the portable path runs";
  const QuantDotTileFn best = BestQuantDotTileX86();
  if (CpuHasAvxVnni()) {
    EXPECT_EQ(best, &QuantDotTileAvxVnni);
  } else if (CpuHasAvx512Vnni()) {
    EXPECT_EQ(best, &QuantDotTileAvx512Vnni);
  } else {
    EXPECT_EQ(best, &QuantDotTileAvx2);
  }
}

}  // namespace
}  // namespace blossom
