#include "kernels/cpu/quant.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace blossom
