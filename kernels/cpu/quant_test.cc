#include "kernels/cpu/quant.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace blossom {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Each dequantized weight is within half a quantization step of the original: scale / 2 for
// round-to-nearest (the int4 value clamped from +8 to +7 is one full step off, still <= scale).
TEST(QuantTest, RoundTripErrorIsWithinOneStepPerBlock) {
  std::mt19937 rng(7);
  const int64_t rows = 5, k = 96;
  std::vector<float> w = Random(rows * k, rng);
  for (DType dtype : {DType::kQ8G32, DType::kQ4G32}) {
    std::vector<char> packed(DTypeBytes(dtype, k) * rows);
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, rows, k, dtype, packed.data()).ok());
    for (int64_t r = 0; r < rows; ++r) {
      const char* row = packed.data() + r * DTypeBytes(dtype, k);
      for (int64_t b = 0; b < k / kQuantBlock; ++b) {
        float amax = 0;
        for (int i = 0; i < kQuantBlock; ++i)
          amax = std::max(amax, std::fabs(w[r * k + b * kQuantBlock + i]));
        const float step = amax / (dtype == DType::kQ8G32 ? 127.0f : 8.0f);
        for (int i = 0; i < kQuantBlock; ++i) {
          const int64_t e = b * kQuantBlock + i;
          const float bound = (dtype == DType::kQ8G32 ? 0.5f : 1.0f) * step * 1.0001f;
          EXPECT_LE(std::fabs(DequantizeAt(row, dtype, e) - w[r * k + e]), bound)
              << DTypeName(dtype) << " row " << r << " element " << e;
        }
      }
    }
  }
}

TEST(QuantTest, BlockMaximumIsExactAndZerosStayZero) {
  std::vector<float> w(32, 0.0f);
  w[3] = -2.5f;
  w[9] = 1.0f;
  for (DType dtype : {DType::kQ8G32, DType::kQ4G32}) {
    std::vector<char> packed(DTypeBytes(dtype, 32));
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, 1, 32, dtype, packed.data()).ok());
    EXPECT_FLOAT_EQ(DequantizeAt(packed.data(), dtype, 3), -2.5f) << DTypeName(dtype);
    EXPECT_EQ(DequantizeAt(packed.data(), dtype, 0), 0.0f) << DTypeName(dtype);
  }
  std::vector<float> zeros(32, 0.0f);
  std::vector<char> packed(DTypeBytes(DType::kQ8G32, 32));
  ASSERT_TRUE(QuantizeWeightRows(zeros.data(), DType::kF32, 1, 32, DType::kQ8G32, packed.data()).ok());
  EXPECT_EQ(DequantizeAt(packed.data(), DType::kQ8G32, 5), 0.0f);
}

TEST(QuantTest, HalfPrecisionInputsQuantizeLikeTheirFp32Values) {
  std::mt19937 rng(3);
  std::vector<float> w = Random(64, rng);
  std::vector<uint16_t> bf16(64);
  ConvertFromF32(w.data(), bf16.data(), DType::kBF16, 64);
  std::vector<float> widened(64);
  ConvertToF32(bf16.data(), DType::kBF16, widened.data(), 64);
  std::vector<char> from_bf16(DTypeBytes(DType::kQ8G32, 64)), from_f32(from_bf16.size());
  ASSERT_TRUE(QuantizeWeightRows(bf16.data(), DType::kBF16, 1, 64, DType::kQ8G32, from_bf16.data()).ok());
  ASSERT_TRUE(QuantizeWeightRows(widened.data(), DType::kF32, 1, 64, DType::kQ8G32, from_f32.data()).ok());
  EXPECT_EQ(from_bf16, from_f32);
}

TEST(QuantTest, RejectsRowLengthsThatAreNotWholeBlocks) {
  std::vector<float> w(40);
  std::vector<char> packed(64);
  absl::Status s = QuantizeWeightRows(w.data(), DType::kF32, 1, 40, DType::kQ8G32, packed.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("40"), std::string::npos) << s;
  s = QuantizeWeightRows(w.data(), DType::kI32, 1, 32, DType::kQ8G32, packed.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantTest, ActivationCodesUseTheFullInt8Range) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * (i - 16);
  Q8Block block;
  QuantizeActivationRow(x.data(), 32, &block);
  EXPECT_FLOAT_EQ(block.scale, 4.0f / 127.0f);
  EXPECT_EQ(block.codes[0], -127);
  EXPECT_EQ(block.codes[16], 0);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(block.codes[i] * block.scale, x[i], block.scale / 2 * 1.0001f);
}

// A block with a NaN or an infinity has no finite representation: a NaN scale (so that every
// dot product it enters is NaN, as in fp32), never -127 for a NaN or -inf for +inf.
TEST(QuantTest, NonFiniteBlocksGetANanScale) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    std::vector<float> x(64, 0.5f);
    x[5] = bad;  // block 0 only
    std::vector<Q8Block> portable(2);
    QuantizeActivationRowPortable(x.data(), 64, portable.data());
    EXPECT_TRUE(std::isnan(portable[0].scale)) << bad;
    EXPECT_TRUE(std::isnan(portable[0].codes[5] * portable[0].scale)) << bad;
    EXPECT_FLOAT_EQ(portable[1].scale, 0.5f / 127.0f) << "the next block is untouched";
    if (CpuHasAvx2Fma()) {
      std::vector<Q8Block> avx2(2);
      QuantizeActivationRowAvx2(x.data(), 64, avx2.data());
      EXPECT_EQ(0, std::memcmp(portable.data(), avx2.data(), 2 * sizeof(Q8Block))) << bad;
    }
    for (DType dtype : {DType::kQ8G32, DType::kQ4G32}) {
      std::vector<char> packed(DTypeBytes(dtype, 64));
      ASSERT_TRUE(QuantizeWeightRows(x.data(), DType::kF32, 1, 64, dtype, packed.data()).ok());
      EXPECT_TRUE(std::isnan(DequantizeAt(packed.data(), dtype, 5))) << DTypeName(dtype) << bad;
      EXPECT_TRUE(std::isnan(DequantizeAt(packed.data(), dtype, 0))) << DTypeName(dtype) << bad;
      EXPECT_TRUE(std::isfinite(DequantizeAt(packed.data(), dtype, 40))) << DTypeName(dtype) << bad;
    }
  }
}

// The AVX2 row quantizer gives the portable one's bytes: random rows at several magnitudes, exact
// ties (x * inverse = n + 0.5 must round to even), zeros, denormals, a NaN, infinities.
TEST(QuantTest, Avx2ActivationQuantizerMatchesPortableBitForBit) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C: only the portable path runs";
  std::mt19937 rng(23);
  std::vector<std::vector<float>> rows;
  for (float magnitude : {1e-30f, 1e-3f, 1.0f, 1e4f, 1e30f}) {
    std::vector<float> r = Random(1024, rng);
    for (float& v : r) v *= magnitude;
    rows.push_back(r);
  }
  std::vector<float> ties(32);  // amax 127: scale 1, inverse 1, so x = n + 0.5 is a tie
  for (int i = 0; i < 32; ++i) ties[i] = (i == 0) ? 127.0f : static_cast<float>(i - 16) + 0.5f;
  rows.push_back(ties);
  rows.push_back(std::vector<float>(64, 0.0f));
  std::vector<float> odd = Random(96, rng);
  odd[3] = std::numeric_limits<float>::denorm_min();
  odd[40] = std::numeric_limits<float>::quiet_NaN();
  odd[70] = std::numeric_limits<float>::infinity();
  odd[71] = -std::numeric_limits<float>::infinity();
  rows.push_back(odd);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t k = static_cast<int64_t>(rows[i].size());
    std::vector<Q8Block> portable(k / kQuantBlock), avx2(k / kQuantBlock);
    QuantizeActivationRowPortable(rows[i].data(), k, portable.data());
    QuantizeActivationRowAvx2(rows[i].data(), k, avx2.data());
    EXPECT_EQ(0, std::memcmp(portable.data(), avx2.data(), portable.size() * sizeof(Q8Block)))
        << "row " << i;
  }
  Q8Block tie_block;
  QuantizeActivationRowAvx2(ties.data(), 32, &tie_block);
  EXPECT_EQ(tie_block.scale, 1.0f);
  EXPECT_EQ(tie_block.codes[1], -14);  // -14.5 rounds to even
  EXPECT_EQ(tie_block.codes[2], -14);  // -13.5 too
  EXPECT_EQ(tie_block.codes[17], 2);   // 1.5
}

}  // namespace
}  // namespace blossom
