#include "benchmarks/length_dist.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(LengthDistTest, ParsesTheThreeKinds) {
  auto f = ParseLengthDist("fixed:128");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->kind, LengthDist::Kind::kFixed);
  EXPECT_EQ(f->ToString(), "fixed:128");
  auto u = ParseLengthDist("uniform:64:256");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->Mean(), 160);
  EXPECT_EQ(u->ToString(), "uniform:64:256");
  auto n = ParseLengthDist("normal:100:10.5");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->b, 10.5);
}

TEST(LengthDistTest, RejectsMalformedSpecs) {
  for (const char* bad : {"", "fixed", "fixed:0", "fixed:1.5", "fixed:1:2", "uniform:5",
                          "uniform:9:3", "uniform:0:3", "normal:10", "normal:0:1",
                          "normal:10:-1", "poisson:3", "fixed:x"}) {
    EXPECT_FALSE(ParseLengthDist(bad).ok()) << bad;
  }
}

TEST(LengthDistTest, FixedIsExact) {
  auto v = SampleLengths(*ParseLengthDist("fixed:7"), 5, 1);
  EXPECT_EQ(v, std::vector<int32_t>(5, 7));
}

TEST(LengthDistTest, UniformCoversTheInclusiveRange) {
  auto v = SampleLengths(*ParseLengthDist("uniform:3:6"), 4000, 2);
  EXPECT_EQ(*std::min_element(v.begin(), v.end()), 3);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 6);
  double mean = 0;
  for (int x : v) mean += x;
  EXPECT_NEAR(mean / 4000, 4.5, 0.1);
}

TEST(LengthDistTest, NormalMatchesMeanAndStdAndIsClampedToOne) {
  auto v = SampleLengths(*ParseLengthDist("normal:200:20"), 10000, 3);
  double mean = 0, var = 0;
  for (int x : v) mean += x;
  mean /= 10000;
  for (int x : v) var += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 200, 1.0);
  EXPECT_NEAR(std::sqrt(var / 9999), 20, 1.0);
  auto low = SampleLengths(*ParseLengthDist("normal:1:50"), 1000, 4);
  EXPECT_EQ(*std::min_element(low.begin(), low.end()), 1);
}

TEST(LengthDistTest, SeedsAreReproducibleAndIndependent) {
  const LengthDist d = *ParseLengthDist("uniform:1:1000");
  EXPECT_EQ(SampleLengths(d, 50, 9), SampleLengths(d, 50, 9));
  EXPECT_NE(SampleLengths(d, 50, 9), SampleLengths(d, 50, 10));
}

}  // namespace
}  // namespace blossom
