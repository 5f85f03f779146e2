#include "kernels/cuda/gemm_plan_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(GemmRowBucketTest, PowersOfTwoUpTo256) {
  EXPECT_EQ(GemmRowBucket(0), 1);
  EXPECT_EQ(GemmRowBucket(1), 1);
  EXPECT_EQ(GemmRowBucket(2), 2);
  EXPECT_EQ(GemmRowBucket(3), 4);
  EXPECT_EQ(GemmRowBucket(4), 4);
  EXPECT_EQ(GemmRowBucket(5), 8);
  EXPECT_EQ(GemmRowBucket(100), 128);
  EXPECT_EQ(GemmRowBucket(129), 256);
  EXPECT_EQ(GemmRowBucket(256), 256);
}

TEST(GemmRowBucketTest, MultiplesOf256Above) {
  EXPECT_EQ(GemmRowBucket(257), 512);
  EXPECT_EQ(GemmRowBucket(512), 512);
  EXPECT_EQ(GemmRowBucket(513), 768);
  EXPECT_EQ(GemmRowBucket(4097), 4352);
  EXPECT_EQ(GemmRowBucket(8192), 8192);
}

TEST(GemmRowBucketTest, EveryRowCountFitsItsBucketAndBucketsAreStable) {
  for (int64_t m = 1; m <= 5000; ++m) {
    const int64_t b = GemmRowBucket(m);
    ASSERT_GE(b, m);
    ASSERT_EQ(GemmRowBucket(b), b) << "a bucket is its own bucket";
    if (m > 1) {
      ASSERT_GE(b, GemmRowBucket(m - 1)) << "monotone at " << m;
    }
  }
}

TEST(GemmRowBucketsTest, ListsWhatAWarmUpMustRun) {
  EXPECT_TRUE(GemmRowBuckets(0).empty());
  EXPECT_EQ(GemmRowBuckets(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(GemmRowBuckets(5), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(GemmRowBuckets(256), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(GemmRowBuckets(600),
            (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768}));
  // Every row count up to the maximum is covered by a listed bucket.
  const std::vector<int64_t> buckets = GemmRowBuckets(3000);
  for (int64_t m = 1; m <= 3000; ++m) {
    const int64_t b = GemmRowBucket(m);
    ASSERT_TRUE(std::find(buckets.begin(), buckets.end(), b) != buckets.end()) << m;
  }
}

TEST(OrderCandidatesByTimeTest, FastestFirstFailuresLastStable) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(OrderCandidatesByTime({}).empty());
  EXPECT_EQ(OrderCandidatesByTime({0.5f, 0.2f, 0.3f}), (std::vector<int>{1, 2, 0}));
  // Ties keep the heuristic's order.
  EXPECT_EQ(OrderCandidatesByTime({0.4f, 0.2f, 0.2f, 0.1f}), (std::vector<int>{3, 1, 2, 0}));
  // A candidate that could not run (negative), NaN or inf goes last, in heuristic order.
  EXPECT_EQ(OrderCandidatesByTime({-1.0f, 0.3f, nan, 0.1f, inf}),
            (std::vector<int>{3, 1, 0, 2, 4}));
  EXPECT_EQ(OrderCandidatesByTime({-1.0f, -1.0f}), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace blossom
