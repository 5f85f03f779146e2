#include "kernels/weight_quant.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(WeightQuantTest, ParsesEveryNameItPrints) {
  for (WeightQuant q : {WeightQuant::kNone, WeightQuant::kInt8, WeightQuant::kInt4, WeightQuant::kBf16}) {
    absl::StatusOr<WeightQuant> parsed = ParseWeightQuant(WeightQuantName(q));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, q);
  }
  EXPECT_EQ(QuantizedDType(WeightQuant::kInt8), DType::kQ8G32);
  EXPECT_EQ(QuantizedDType(WeightQuant::kInt4), DType::kQ4G32);
  EXPECT_EQ(QuantizedDType(WeightQuant::kBf16), DType::kBF16);
  EXPECT_STREQ(WeightQuantName(WeightQuant::kBf16), "bf16");
}

TEST(WeightQuantTest, UnknownValueIsNamedInTheError) {
  absl::StatusOr<WeightQuant> bad = ParseWeightQuant("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("'fp8'"), std::string::npos);
}

}  // namespace
}  // namespace blossom
