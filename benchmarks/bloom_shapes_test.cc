#include "benchmarks/bloom_shapes.h"

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Parameter counts from reference/bloom.md (the model cards).
TEST(BloomShapesTest, ParamCountsMatchTheReleasedModels) {
  EXPECT_EQ(BloomShapeByName("560m")->ParamCount(), 559214592);
  EXPECT_EQ(BloomShapeByName("1b1")->ParamCount(), 1065314304);
  EXPECT_EQ(BloomShapeByName("1b7")->ParamCount(), 1722408960);
  EXPECT_EQ(BloomShapeByName("3b")->ParamCount(), 3002557440);
  EXPECT_EQ(BloomShapeByName("7b1")->ParamCount(), 7069016064);
  EXPECT_EQ(BloomShapeByName("176b")->ParamCount(), 176247271424);
}

TEST(BloomShapesTest, TensorSpecsSumToParamCount) {
  for (const char* name : {"560m", "3b", "176b-2layers"}) {
    BloomShape shape = *BloomShapeByName(name);
    int64_t total = 0;
    for (const TensorSpec& t : BloomTensorSpecs(shape)) total += t.NumElements();
    EXPECT_EQ(total, shape.ParamCount()) << name;
  }
}

TEST(BloomShapesTest, Truncated176b) {
  absl::StatusOr<BloomShape> s = BloomShapeByName("176b-3layers");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->hidden, 14336);
  EXPECT_EQ(s->heads, 112);
  EXPECT_EQ(s->layers, 3);
  EXPECT_EQ(s->vocab, 250880);
  EXPECT_EQ(s->head_dim(), 128);
  EXPECT_FALSE(BloomShapeByName("176b-0layers").ok());
  EXPECT_FALSE(BloomShapeByName("176b-layers").ok());
  EXPECT_FALSE(BloomShapeByName("176b-xlayers").ok());
  EXPECT_FALSE(BloomShapeByName("13b").ok());
}

TEST(BloomShapesTest, Validate) {
  EXPECT_TRUE(ValidateBloomShape({"custom", 64, 2, 4, 2002}).ok());
  EXPECT_FALSE(ValidateBloomShape({"custom", 64, 2, 5, 2002}).ok());
  EXPECT_FALSE(ValidateBloomShape({"custom", 64, 0, 4, 2002}).ok());
  EXPECT_FALSE(ValidateBloomShape({"custom", 64, 2, 4, 3}).ok());
}

}  // namespace
}  // namespace blossom
