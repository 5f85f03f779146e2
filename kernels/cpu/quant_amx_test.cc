#include "kernels/cpu/quant_amx.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_dot_tile.h"

namespace blossom {
namespace {

struct Operands {
  std::vector<Q8Block> x;  // 16 rows of k / 32 blocks
  std::vector<char> w;     // 16 q8g32 rows
  size_t row_bytes = 0;
};

// Random normal rows with zeros and extremes, quantized like QuantGemmNT does.
Operands Make(int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> xf(kAmxTileRows * k), wf(kAmxTileRows * k);
  for (float& v : xf) v = dist(rng);
  for (float& v : wf) v = dist(rng);
  xf[5] = 0.0f;
  wf[7] = 0.0f;
  wf[9] = -50.0f;
  xf[k + 3] = 60.0f;
  Operands ops;
  const int64_t blocks = k / kQuantBlock;
  ops.x.resize(kAmxTileRows * blocks);
  for (int r = 0; r < kAmxTileRows; ++r)
    QuantizeActivationRow(xf.data() + r * k, k, ops.x.data() + r * blocks);
  ops.row_bytes = DTypeBytes(DType::kQ8G32, k);
  ops.w.resize(ops.row_bytes * kAmxTileRows);
  EXPECT_TRUE(
      QuantizeWeightRows(wf.data(), DType::kF32, kAmxTileRows, k, DType::kQ8G32, ops.w.data()).ok());
  return ops;
}

// The packed layout and the scalar 16x16 tile reproduce the contract's reference path (the
// portable quant_dot_tile) bit for bit, with a partial group (rows past `rows` are zeros).
TEST(QuantAmxTest, PackedScalarTileMatchesThePortableDots) {
  std::mt19937 rng(3);
  for (int64_t k : {32, 96, 1024}) {
    for (int rows : {kAmxTileRows, 11}) {
      Operands ops = Make(k, rng);
      const int64_t blocks = k / kQuantBlock;
      std::vector<int8_t> codes(blocks * kAmxXBlockBytes);
      std::vector<float> scales(blocks * kAmxTileRows);
      PackAmxX(ops.x.data(), blocks, rows, blocks, codes.data(), scales.data());
      float dots[kAmxTileRows * kAmxTileRows];
      Q8Tile16x16Scalar(codes.data(), scales.data(), ops.w.data(), ops.row_bytes, blocks, dots,
                        kAmxTileRows);
      for (int r = 0; r < kAmxTileRows; ++r)
        for (int c = 0; c < kAmxTileRows; ++c) {
          float want = 0.0f;
          if (r < rows) {
            QuantDotTilePortable(ops.x.data() + r * blocks, blocks, 1,
                                 ops.w.data() + c * ops.row_bytes, DType::kQ8G32, 1, k, &want, 1);
          }
          ASSERT_TRUE(std::isfinite(dots[r * kAmxTileRows + c]));
          ASSERT_EQ(0, std::memcmp(&want, &dots[r * kAmxTileRows + c], sizeof(float)))
              << "k " << k << " rows " << rows << " pair " << r << "," << c;
        }
    }
  }
}

// The AMX kernels scale and store with AVX-512: AMX is never chosen without it.
TEST(QuantAmxTest, AmxImpliesAvx512) { EXPECT_TRUE(!AmxInt8Usable() || CpuHasAvx512()); }

// The AMX tile gives the scalar tile's bits.
TEST(QuantAmxTest, AmxTileMatchesTheScalarTile) {
  if (!AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 on this CPU, or the OS did not grant it";
  std::mt19937 rng(4);
  for (int64_t k : {32, 64, 224, 1024, 4096}) {
    Operands ops = Make(k, rng);
    const int64_t blocks = k / kQuantBlock;
    std::vector<int8_t> codes(blocks * kAmxXBlockBytes);
    std::vector<float> scales(blocks * kAmxTileRows);
    PackAmxX(ops.x.data(), blocks, kAmxTileRows, blocks, codes.data(), scales.data());
    float want[kAmxTileRows * kAmxTileRows], got[kAmxTileRows * kAmxTileRows];
    Q8Tile16x16Scalar(codes.data(), scales.data(), ops.w.data(), ops.row_bytes, blocks, want,
                      kAmxTileRows);
    AmxQ8Tile16x16(codes.data(), scales.data(), ops.w.data(), ops.row_bytes, blocks, got,
                   kAmxTileRows);
    EXPECT_EQ(0, std::memcmp(want, got, sizeof(want))) << "k " << k;
  }
}

// The two-group tile gives the bits of the scalar tile on each group (two different x groups
// against the same weight rows, packed one after the other as QuantGemmNT packs them). Like the
// one-group tile it executes AMX instructions wherever the build has them, so only a CPU that
// has AMX-INT8 may run it (QuantGemmNT calls it only then): an AVX-512 CPU without AMX (AMD Zen 4)
// died of SIGILL here.
TEST(QuantAmxTest, TwoGroupTileMatchesTheScalarTileOnEachGroup) {
  if (!AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 on this CPU, or the OS did not grant it";
  std::mt19937 rng(5);
  for (int64_t k : {32, 96, 1024, 4096}) {
    const Operands first = Make(k, rng), second = Make(k, rng);
    const int64_t blocks = k / kQuantBlock;
    std::vector<int8_t> codes(2 * blocks * kAmxXBlockBytes);
    std::vector<float> scales(2 * blocks * kAmxTileRows);
    PackAmxX(first.x.data(), blocks, kAmxTileRows, blocks, codes.data(), scales.data());
    PackAmxX(second.x.data(), blocks, kAmxTileRows, blocks, codes.data() + blocks * kAmxXBlockBytes,
             scales.data() + blocks * kAmxTileRows);
    float want[2 * kAmxTileRows * kAmxTileRows], got[2 * kAmxTileRows * kAmxTileRows];
    for (int g = 0; g < 2; ++g)
      Q8Tile16x16Scalar(codes.data() + g * blocks * kAmxXBlockBytes,
                        scales.data() + g * blocks * kAmxTileRows, first.w.data(),
                        first.row_bytes, blocks, want + g * kAmxTileRows * kAmxTileRows,
                        kAmxTileRows);
    AmxQ8Tile32x16(codes.data(), scales.data(), first.w.data(), first.row_bytes, blocks, got,
                   kAmxTileRows);
    EXPECT_EQ(0, std::memcmp(want, got, sizeof(want))) << "k " << k;
    // The groups differ, so a tile that computed one group twice would fail above.
    EXPECT_NE(0, std::memcmp(want, want + kAmxTileRows * kAmxTileRows, sizeof(want) / 2));
  }
}

}  // namespace
}  // namespace blossom
