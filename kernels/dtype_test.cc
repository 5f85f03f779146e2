#include "kernels/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
}

TEST(DTypeTest, BlockQuantizedDtypesCountBytesPerBlock) {
  EXPECT_EQ(DTypeBlockElems(DType::kF16), 1);
  EXPECT_EQ(DTypeBlockElems(DType::kQ8G32), 32);
  EXPECT_EQ(DTypeBytes(DType::kF16, 64), 128u);
  EXPECT_EQ(DTypeBytes(DType::kQ8G32, 64), 72u);   // 2 blocks of scale + 32 int8
  EXPECT_EQ(DTypeBytes(DType::kQ4G32, 64), 40u);   // 2 blocks of scale + 16 bytes
  EXPECT_FALSE(IsFloat(DType::kQ8G32));
  EXPECT_TRUE(IsBlockQuantized(DType::kQ4G32));
  EXPECT_STREQ(DTypeName(DType::kQ4G32), "q4g32");
  // The panel layout of int8 weights: another order of the same blocks, the same bytes.
  EXPECT_TRUE(IsBlockQuantized(DType::kQ8G32Panel16));
  EXPECT_EQ(DTypeBlockElems(DType::kQ8G32Panel16), 32);
  EXPECT_EQ(DTypeBytes(DType::kQ8G32Panel16, 16 * 1024), DTypeBytes(DType::kQ8G32, 16 * 1024));
  EXPECT_FALSE(IsFloat(DType::kQ8G32Panel16));
  EXPECT_STREQ(DTypeName(DType::kQ8G32Panel16), "q8g32-panel16");
  // The bf16 panel layout (--quantize bf16): 2 bytes a weight, read by the CPU's bf16 GEMM only.
  EXPECT_EQ(DTypeBytes(DType::kBF16Panel16, 64), 128u);
  EXPECT_FALSE(IsFloat(DType::kBF16Panel16));
  EXPECT_FALSE(IsBlockQuantized(DType::kBF16Panel16));
  EXPECT_STREQ(DTypeName(DType::kBF16Panel16), "bf16-panel16");
  // The int4 panel layout: the same blocks as kQ4G32 in another order.
  EXPECT_TRUE(IsBlockQuantized(DType::kQ4G32Panel16));
  EXPECT_EQ(DTypeBytes(DType::kQ4G32Panel16, 16 * 1024), DTypeBytes(DType::kQ4G32, 16 * 1024));
  EXPECT_STREQ(DTypeName(DType::kQ4G32Panel16), "q4g32-panel16");
}

TEST(DTypeTest, RowPairedDtypesKeepTheirElementSize) {
  for (DType element : {DType::kF32, DType::kF16, DType::kBF16}) {
    const DType packed = PairsOf(element);
    EXPECT_TRUE(IsRowPaired(packed));
    EXPECT_FALSE(IsFloat(packed));  // not a row-major float tensor: only the CPU GEMM reads it
    EXPECT_FALSE(IsBlockQuantized(packed));
    EXPECT_EQ(PairedElementDType(packed), element);
    EXPECT_EQ(DTypeBytes(packed, 1024), DTypeBytes(element, 1024));
    EXPECT_EQ(DTypeBlockElems(packed), 1);
  }
  EXPECT_FALSE(IsRowPaired(DType::kF32));
  EXPECT_STREQ(DTypeName(DType::kBF16Pairs), "bf16-pairs");
}

TEST(DTypeTest, ParseAcceptsHuggingFaceNamesAndRejectsOthers) {
  EXPECT_EQ(*ParseDType("float16"), DType::kF16);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("FP32"), DType::kF32);
  absl::StatusOr<DType> bad = ParseDType("int4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int4"), std::string::npos);
}

TEST(DTypeTest, HalfKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);
}

TEST(DTypeTest, HalfRoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    float f = HalfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), bits) << "bits " << bits;
  }
}

TEST(DTypeTest, HalfRoundsToNearestEven) {
  // 1 + 2^-11 lies exactly between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies between 1 + 2^-10 (odd) and 1 + 2^-9 (even): goes up.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Subnormal tie: 1.5 * 2^-24 -> 2 * 2^-24 (even).
  EXPECT_EQ(FloatToHalf(1.5f * std::ldexp(1.0f, -24)), 0x0002);
  EXPECT_EQ(FloatToHalf(0.5f * std::ldexp(1.0f, -24)), 0x0000);
}

TEST(DTypeTest, BFloat16RoundTripAndRounding) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    float f = BF16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBF16(f), bits);
  }
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1.0).
  EXPECT_EQ(FloatToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(std::numeric_limits<float>::quiet_NaN()))));
}

// ConvertToF32 from bf16 (8 at a time, then a scalar tail) widens every bit pattern exactly, NaN
// payloads included.
TEST(DTypeTest, Bf16BufferWideningKeepsEveryBitPattern) {
  std::vector<uint16_t> all(65536 + 3);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> wide(all.size());
  ConvertToF32(all.data(), DType::kBF16, wide.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &wide[i], sizeof(bits));
    ASSERT_EQ(bits, static_cast<uint32_t>(all[i]) << 16) << i;
  }
}

TEST(DTypeTest, KvCacheDtypeIsAutoOrADtype) {
  absl::StatusOr<std::optional<DType>> kv = ParseKvCacheDtype("auto");
  ASSERT_TRUE(kv.ok());
  EXPECT_FALSE(kv->has_value());
  kv = ParseKvCacheDtype("bf16");
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ(**kv, DType::kBF16);
  kv = ParseKvCacheDtype("int8");
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(kv.status().message()).find("'int8'"), std::string::npos);
}

TEST(DTypeTest, ConvertBuffers) {
  const float src[4] = {1.5f, -2.25f, 0.0f, 3.0f};
  uint16_t half[4];
  float back[4];
  ConvertFromF32(src, half, DType::kF16, 4);
  ConvertToF32(half, DType::kF16, back, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], src[i]);
  ConvertFromF32(src, half, DType::kBF16, 4);
  ConvertToF32(half, DType::kBF16, back, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], src[i]);
}

}  // namespace
}  // namespace blossom
