#include "kernels/cpu/quant_panel_tile.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_dot_tile.h"
#include "kernels/dtype.h"

namespace blossom {
namespace {

// `panels` panels of int8 weights (16 rows each) and `rows` x rows, from random normal values
// with a zero, a large weight and a large x value, so the codes reach 0 and +-127 (stored as 128,
// 1 and 255: both ends of the unsigned operand).
struct Operands {
  std::vector<float> wf;
  std::vector<Q8Block> x;
  std::vector<int32_t> x_bias;
  std::vector<char> w_rows, w_panels;
};

std::vector<float> RandomValues(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

Operands Make(int rows, int panels, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = int64_t{panels} * kQ8PanelRows, blocks = k / kQuantBlock;
  Operands ops;
  std::vector<float> xf(rows * k);
  ops.wf.resize(n * k);
  for (float& v : xf) v = dist(rng);
  for (float& v : ops.wf) v = dist(rng);
  xf[0] = 0.0f;
  xf[1] = 50.0f;
  ops.wf[1] = 0.0f;
  ops.wf[2] = -40.0f;
  ops.x.resize(rows * blocks);
  ops.x_bias.resize(rows * blocks);
  for (int r = 0; r < rows; ++r) {
    QuantizeActivationRow(xf.data() + r * k, k, ops.x.data() + r * blocks);
    QuantPanelXBias(ops.x.data() + r * blocks, blocks, kQ8PanelCodeOffset, ops.x_bias.data() + r * blocks);
  }
  ops.w_rows.resize(DTypeBytes(DType::kQ8G32, k) * n);
  ops.w_panels.resize(DTypeBytes(DType::kQ8G32Panel16, k) * n);
  EXPECT_TRUE(QuantizeWeightRows(ops.wf.data(), DType::kF32, n, k, DType::kQ8G32, ops.w_rows.data()).ok());
  EXPECT_TRUE(
      QuantizeWeightRows(ops.wf.data(), DType::kF32, n, k, DType::kQ8G32Panel16, ops.w_panels.data()).ok());
  return ops;
}

// Packing into panels keeps every block (codes and scale) of the row-major packing exactly, and
// QuantizeWeightRows into panels is the row-major quantization repacked.
TEST(QuantPanelTest, PanelsHoldTheRowMajorBlocks) {
  std::mt19937 rng(1);
  const int64_t k = 96, blocks = k / kQuantBlock;
  Operands ops = Make(1, 3, k, rng);
  const int64_t n = 3 * kQ8PanelRows;
  std::vector<Q8Block> unpacked(n * blocks);
  UnpackQ8Panels(ops.w_panels.data(), n, blocks, unpacked.data());
  ASSERT_EQ(unpacked.size() * sizeof(Q8Block), ops.w_rows.size());
  EXPECT_EQ(0, std::memcmp(unpacked.data(), ops.w_rows.data(), ops.w_rows.size()));
  std::vector<char> repacked(ops.w_panels.size());
  PackQ8Panels(unpacked.data(), n, blocks, repacked.data());
  EXPECT_EQ(repacked, ops.w_panels);
  // Row 16 + 5's code 7 of block 2: byte 64 * (7 / 4) + 4 * 5 + 7 % 4 of panel 1's block 2.
  const auto* panel_block = reinterpret_cast<const uint8_t*>(ops.w_panels.data()) + (1 * blocks + 2) * kQ8PanelBlockBytes;
  EXPECT_EQ(panel_block[64 * 1 + 4 * 5 + 3], static_cast<uint8_t>(unpacked[(16 + 5) * blocks + 2].codes[7] + 128));
}

TEST(QuantPanelTest, RefusesRowsThatDoNotFillPanels) {
  std::vector<float> w(17 * 32, 1.0f);
  std::vector<char> out(DTypeBytes(DType::kQ8G32Panel16, 32) * 17);
  const absl::Status s = QuantizeWeightRows(w.data(), DType::kF32, 17, 32, DType::kQ8G32Panel16, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("16"), std::string::npos) << s;
}

TEST(QuantPanelTest, XBiasIsMinusTheCodeOffsetTimesTheCodeSum) {
  Q8Block block{};
  for (int i = 0; i < kQuantBlock; ++i) block.codes[i] = static_cast<int8_t>(i % 2 == 0 ? 127 : -3);
  int32_t bias = 0;
  QuantPanelXBias(&block, 1, kQ8PanelCodeOffset, &bias);
  EXPECT_EQ(bias, -128 * (16 * 127 - 16 * 3));
  QuantPanelXBias(&block, 1, kQ4PanelCodeOffset, &bias);
  EXPECT_EQ(bias, -8 * (16 * 127 - 16 * 3));
}

// A panel tile's dots against the row-major portable tile's, bit for bit: the same contract
// (quant_dot_tile.h), so the same floats, for every row count and some block counts.
void ExpectPanelTileMatchesRowMajor(QuantPanelTileFn tile, const char* name) {
  std::mt19937 rng(7);
  for (int64_t k : {32, 64, 1024, 4096}) {
    const int64_t blocks = k / kQuantBlock;
    for (int rows : {1, 4, 8}) {
      Operands ops = Make(rows, 2, k, rng);
      for (int panel = 0; panel < 2; ++panel) {
        std::vector<float> got(rows * kQ8PanelRows, NAN);
        tile(ops.x.data(), ops.x_bias.data(), blocks, rows,
             ops.w_panels.data() + panel * kQ8PanelRows * DTypeBytes(DType::kQ8G32, k), blocks, got.data(),
             kQ8PanelRows);
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < kQ8PanelRows; ++c) {
            float want = NAN;
            QuantDotTilePortable(ops.x.data() + r * blocks, blocks, 1,
                                 ops.w_rows.data() + (panel * kQ8PanelRows + c) * DTypeBytes(DType::kQ8G32, k),
                                 DType::kQ8G32, 1, k, &want, 1);
            ASSERT_TRUE(std::isfinite(got[r * kQ8PanelRows + c])) << name;
            ASSERT_EQ(0, std::memcmp(&want, &got[r * kQ8PanelRows + c], sizeof(float)))
                << name << " k " << k << " rows " << rows << " pair " << r << "," << c << ": " << want << " vs "
                << got[r * kQ8PanelRows + c];
          }
        }
      }
    }
  }
}

TEST(QuantPanelTest, PortableTileGivesTheRowMajorBits) {
  ExpectPanelTileMatchesRowMajor(&QuantPanelTilePortable, "portable");
}

TEST(QuantPanelTest, Avx512VnniTileGivesTheRowMajorBits) {
  if (!QuantPanelTileAvx512VnniUsable()) GTEST_SKIP() << "no AVX-512 with AVX512-VNNI on this CPU";
  ExpectPanelTileMatchesRowMajor(&QuantPanelTileAvx512Vnni, "avx512-vnni");
}

// int4 panels: the same blocks as the row-major packing (pack, unpack, quantize into panels), with
// nibble byte j of row r at Q4PanelByteOffset(r, j).
TEST(QuantPanelTest, Q4PanelsHoldTheRowMajorBlocks) {
  std::mt19937 rng(3);
  const int64_t n = 32, k = 96, blocks = k / kQuantBlock;
  std::vector<float> w = RandomValues(n * k, rng);
  std::vector<Q4Block> rows(n * blocks), unpacked(n * blocks);
  std::vector<char> panels(DTypeBytes(DType::kQ4G32Panel16, k) * n), direct(panels.size());
  ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, DType::kQ4G32, rows.data()).ok());
  ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, DType::kQ4G32Panel16, direct.data()).ok());
  PackQ4Panels(rows.data(), n, blocks, panels.data());
  EXPECT_EQ(panels, direct);
  UnpackQ4Panels(panels.data(), n, blocks, unpacked.data());
  EXPECT_EQ(0, std::memcmp(unpacked.data(), rows.data(), rows.size() * sizeof(Q4Block)));
  // Row 16 + 5's nibble byte 7 of block 2: panel 1's block 2, byte 64 * 1 + 4 * 5 + 3.
  const auto* block = reinterpret_cast<const uint8_t*>(panels.data()) + (1 * blocks + 2) * kQ4PanelBlockBytes;
  EXPECT_EQ(block[64 + 20 + 3], rows[(16 + 5) * blocks + 2].nibbles[7]);
  std::vector<char> out(panels.size());
  EXPECT_EQ(QuantizeWeightRows(w.data(), DType::kF32, 17, k, DType::kQ4G32Panel16, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// An int4 panel tile's dots against the row-major int4 portable tile's, bit for bit.
void ExpectQ4PanelTileMatchesRowMajor(QuantPanelTileFn tile, const char* name) {
  std::mt19937 rng(9);
  for (int64_t k : {32, 64, 1024, 4096}) {
    const int64_t blocks = k / kQuantBlock, n = 2 * kQ4PanelRows;
    for (int rows : {1, 4, 8}) {
      std::vector<float> xf = RandomValues(rows * k, rng), w = RandomValues(n * k, rng);
      xf[1] = 50.0f;  // a block whose codes reach +-127
      std::vector<Q8Block> x(rows * blocks);
      std::vector<int32_t> x_bias(rows * blocks);
      for (int r = 0; r < rows; ++r) {
        QuantizeActivationRow(xf.data() + r * k, k, x.data() + r * blocks);
        QuantPanelXBias(x.data() + r * blocks, blocks, kQ4PanelCodeOffset, x_bias.data() + r * blocks);
      }
      std::vector<char> w_rows(DTypeBytes(DType::kQ4G32, k) * n), w_panels(w_rows.size());
      ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, DType::kQ4G32, w_rows.data()).ok());
      ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, DType::kQ4G32Panel16, w_panels.data()).ok());
      const size_t row_bytes = DTypeBytes(DType::kQ4G32, k);
      for (int panel = 0; panel < 2; ++panel) {
        std::vector<float> got(rows * kQ4PanelRows, NAN);
        tile(x.data(), x_bias.data(), blocks, rows, w_panels.data() + panel * kQ4PanelRows * row_bytes, blocks,
             got.data(), kQ4PanelRows);
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < kQ4PanelRows; ++c) {
            float want = NAN;
            QuantDotTilePortable(x.data() + r * blocks, blocks, 1,
                                 w_rows.data() + (panel * kQ4PanelRows + c) * row_bytes, DType::kQ4G32, 1, k,
                                 &want, 1);
            const float g = got[r * kQ4PanelRows + c];
            ASSERT_TRUE(std::isfinite(g)) << name;
            ASSERT_EQ(0, std::memcmp(&want, &g, sizeof(float)))
                << name << " k " << k << " rows " << rows << " pair " << r << "," << c << ": " << want
                << " vs " << g;
          }
        }
      }
    }
  }
}

TEST(QuantPanelTest, Q4PortableTileGivesTheRowMajorBits) {
  ExpectQ4PanelTileMatchesRowMajor(&QuantQ4PanelTilePortable, "portable");
}

TEST(QuantPanelTest, Q4Avx512VnniTileGivesTheRowMajorBits) {
  if (!QuantPanelTileAvx512VnniUsable()) GTEST_SKIP() << "no AVX-512 with AVX512-VNNI on this CPU";
  ExpectQ4PanelTileMatchesRowMajor(&QuantQ4PanelTileAvx512Vnni, "avx512-vnni");
}

}  // namespace
}  // namespace blossom
