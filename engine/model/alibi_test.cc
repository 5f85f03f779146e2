#include "engine/model/alibi.h"

#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Slopes exactly as torch computes them in Hugging Face's build_alibi_tensor (fp32 base raised
// to integer powers), printed as hex floats by tests/fixtures' Python environment. The fp32
// rounding of the base makes some differ from the exact powers of two by a few ULPs; HF's values
// are the ones to match.
const std::map<int, std::vector<float>>& TorchSlopes() {
  static const auto* slopes = new std::map<int, std::vector<float>>{
    {1, {0x1.0000000000000p-8f}},
    {6, {0x1.0000000000000p-2f, 0x1.0000000000000p-4f, 0x1.0000000000000p-6f, 0x1.0000000000000p-8f, 0x1.0000000000000p-1f, 0x1.0000000000000p-3f}},
    {16, {0x1.6a09e60000000p-1f, 0x1.fffffe0000000p-2f, 0x1.6a09e60000000p-2f, 0x1.fffffe0000000p-3f, 0x1.6a09e40000000p-3f, 0x1.fffffc0000000p-4f, 0x1.6a09e40000000p-4f, 0x1.fffffc0000000p-5f, 0x1.6a09e20000000p-5f, 0x1.fffffa0000000p-6f, 0x1.6a09e20000000p-6f, 0x1.fffffa0000000p-7f, 0x1.6a09e00000000p-7f, 0x1.fffff80000000p-8f, 0x1.6a09e00000000p-8f, 0x1.fffff60000000p-9f}},
    {32, {0x1.ae89fa0000000p-1f, 0x1.6a09e80000000p-1f, 0x1.306fe20000000p-1f, 0x1.0000000000000p-1f, 0x1.ae89fc0000000p-2f, 0x1.6a09e80000000p-2f, 0x1.306fe20000000p-2f, 0x1.0000020000000p-2f, 0x1.ae89fe0000000p-3f, 0x1.6a09ea0000000p-3f, 0x1.306fe40000000p-3f, 0x1.0000020000000p-3f, 0x1.ae89fe0000000p-4f, 0x1.6a09ec0000000p-4f, 0x1.306fe40000000p-4f, 0x1.0000040000000p-4f, 0x1.ae8a000000000p-5f, 0x1.6a09ec0000000p-5f, 0x1.306fe60000000p-5f, 0x1.0000040000000p-5f, 0x1.ae8a020000000p-6f, 0x1.6a09ee0000000p-6f, 0x1.306fe80000000p-6f, 0x1.0000060000000p-6f, 0x1.ae8a040000000p-7f, 0x1.6a09f00000000p-7f, 0x1.306fe80000000p-7f, 0x1.0000060000000p-7f, 0x1.ae8a060000000p-8f, 0x1.6a09f00000000p-8f, 0x1.306fea0000000p-8f, 0x1.0000080000000p-8f}},
    {112, {0x1.d5818e0000000p-1f, 0x1.ae89fa0000000p-1f, 0x1.8ace540000000p-1f, 0x1.6a09e60000000p-1f, 0x1.4bfdae0000000p-1f, 0x1.306fe20000000p-1f, 0x1.172b840000000p-1f, 0x1.0000000000000p-1f, 0x1.d581900000000p-2f, 0x1.ae89fc0000000p-2f, 0x1.8ace560000000p-2f, 0x1.6a09e80000000p-2f, 0x1.4bfdb00000000p-2f, 0x1.306fe20000000p-2f, 0x1.172b860000000p-2f, 0x1.0000020000000p-2f, 0x1.d581920000000p-3f, 0x1.ae89fc0000000p-3f, 0x1.8ace580000000p-3f, 0x1.6a09ea0000000p-3f, 0x1.4bfdb00000000p-3f, 0x1.306fe40000000p-3f, 0x1.172b860000000p-3f, 0x1.0000020000000p-3f, 0x1.d581920000000p-4f, 0x1.ae89fe0000000p-4f, 0x1.8ace580000000p-4f, 0x1.6a09ea0000000p-4f, 0x1.4bfdb20000000p-4f, 0x1.306fe40000000p-4f, 0x1.172b880000000p-4f, 0x1.0000040000000p-4f, 0x1.d581940000000p-5f, 0x1.ae8a000000000p-5f, 0x1.8ace5a0000000p-5f, 0x1.6a09ec0000000p-5f, 0x1.4bfdb20000000p-5f, 0x1.306fe60000000p-5f, 0x1.172b880000000p-5f, 0x1.0000040000000p-5f, 0x1.d581960000000p-6f, 0x1.ae8a000000000p-6f, 0x1.8ace5a0000000p-6f, 0x1.6a09ec0000000p-6f, 0x1.4bfdb40000000p-6f, 0x1.306fe60000000p-6f, 0x1.172b8a0000000p-6f, 0x1.0000040000000p-6f, 0x1.d581980000000p-7f, 0x1.ae8a020000000p-7f, 0x1.8ace5c0000000p-7f, 0x1.6a09ee0000000p-7f, 0x1.4bfdb40000000p-7f, 0x1.306fe80000000p-7f, 0x1.172b8a0000000p-7f, 0x1.0000060000000p-7f, 0x1.d581980000000p-8f, 0x1.ae8a040000000p-8f, 0x1.8ace5e0000000p-8f, 0x1.6a09f00000000p-8f, 0x1.4bfdb60000000p-8f, 0x1.306fe80000000p-8f, 0x1.172b8a0000000p-8f, 0x1.0000060000000p-8f, 0x1.ea4afa0000000p-1f, 0x1.c199be0000000p-1f, 0x1.9c49180000000p-1f, 0x1.7a11460000000p-1f, 0x1.5ab07c0000000p-1f, 0x1.3dea640000000p-1f, 0x1.2387a60000000p-1f, 0x1.0b55860000000p-1f, 0x1.ea4af80000000p-2f, 0x1.c199ba0000000p-2f, 0x1.9c49160000000p-2f, 0x1.7a11440000000p-2f, 0x1.5ab07a0000000p-2f, 0x1.3dea620000000p-2f, 0x1.2387a40000000p-2f, 0x1.0b55840000000p-2f, 0x1.ea4af40000000p-3f, 0x1.c199b80000000p-3f, 0x1.9c49140000000p-3f, 0x1.7a11420000000p-3f, 0x1.5ab07a0000000p-3f, 0x1.3dea600000000p-3f, 0x1.2387a20000000p-3f, 0x1.0b55820000000p-3f, 0x1.ea4af20000000p-4f, 0x1.c199b60000000p-4f, 0x1.9c49100000000p-4f, 0x1.7a11400000000p-4f, 0x1.5ab0780000000p-4f, 0x1.3dea5e0000000p-4f, 0x1.2387a00000000p-4f, 0x1.0b55820000000p-4f, 0x1.ea4af00000000p-5f, 0x1.c199b40000000p-5f, 0x1.9c490e0000000p-5f, 0x1.7a113e0000000p-5f, 0x1.5ab0760000000p-5f, 0x1.3dea5c0000000p-5f, 0x1.2387a00000000p-5f, 0x1.0b55800000000p-5f, 0x1.ea4aec0000000p-6f, 0x1.c199b20000000p-6f, 0x1.9c490c0000000p-6f, 0x1.7a113c0000000p-6f, 0x1.5ab0740000000p-6f, 0x1.3dea5a0000000p-6f, 0x1.23879e0000000p-6f, 0x1.0b557e0000000p-6f}},
  };
  return *slopes;
}

// torch's pow is ~1 ULP accurate, ours correctly rounded: every slope within 1 ULP, and nearly
// all bit-identical.
TEST(AlibiTest, WithinOneUlpOfTorchAndMostlyBitIdentical) {
  int total = 0, identical = 0;
  for (const auto& [heads, expected] : TorchSlopes()) {
    std::vector<float> got = AlibiSlopes(heads);
    ASSERT_EQ(got.size(), expected.size()) << heads << " heads";
    for (size_t i = 0; i < got.size(); ++i) {
      ++total;
      if (got[i] == expected[i]) {
        ++identical;
        continue;
      }
      EXPECT_TRUE(std::nextafter(got[i], 0.0f) == expected[i] ||
                  std::nextafter(got[i], 1.0f) == expected[i])
          << heads << " heads, slope " << i << ": " << got[i] << " vs torch " << expected[i];
    }
  }
  EXPECT_GE(identical, total * 95 / 100) << identical << " of " << total << " bit-identical";
}

TEST(AlibiTest, PowerOfTwoHeadsFollowTheFormula) {
  // n = 16: 2^(-k/2); n = 32: 2^(-k/4), up to fp32 rounding of the base.
  std::vector<float> s = AlibiSlopes(16);
  ASSERT_EQ(s.size(), 16u);
  for (int k = 1; k <= 16; ++k) EXPECT_NEAR(s[k - 1], std::pow(2.0, -k / 2.0), 2e-6 * s[k - 1]);
  s = AlibiSlopes(32);
  for (int k = 1; k <= 32; ++k) EXPECT_NEAR(s[k - 1], std::pow(2.0, -k / 4.0), 2e-6 * s[k - 1]);
}

TEST(AlibiTest, NonPowerOfTwoHeadsUseTheSecondBranch) {
  // n = 112 (BLOOM-176B): 2^(-k/8) for k = 1..64, then 2^(-j/16) for j = 1, 3, ..., 95.
  std::vector<float> s = AlibiSlopes(112);
  ASSERT_EQ(s.size(), 112u);
  for (int k = 1; k <= 64; ++k) EXPECT_NEAR(s[k - 1], std::pow(2.0, -k / 8.0), 2e-6 * s[k - 1]);
  for (int i = 0; i < 48; ++i)
    EXPECT_NEAR(s[64 + i], std::pow(2.0, -(2 * i + 1) / 16.0), 2e-6 * s[64 + i]);
  // n = 6: 4 slopes 2^(-2k), then 2^(-1) and 2^(-3).
  s = AlibiSlopes(6);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_FLOAT_EQ(s[4], 0.5f);
  EXPECT_FLOAT_EQ(s[5], 0.125f);
}

}  // namespace
}  // namespace blossom
