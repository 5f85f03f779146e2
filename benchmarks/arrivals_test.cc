#include "benchmarks/arrivals.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace blossom {
namespace {

struct GapStats {
  double mean = 0, variance = 0;
};

GapStats Gaps(const std::vector<double>& times) {
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  GapStats s;
  for (double g : gaps) s.mean += g;
  s.mean /= static_cast<double>(gaps.size());
  for (double g : gaps) s.variance += (g - s.mean) * (g - s.mean);
  s.variance /= static_cast<double>(gaps.size() - 1);
  return s;
}

TEST(ArrivalsTest, PoissonMeanRateWithinAFewPercent) {
  ArrivalOptions options;
  options.request_rate = 50.0;
  options.seed = 7;
  auto times = ArrivalSchedule(options, 10001);  // 10,000 gaps
  ASSERT_TRUE(times.ok()) << times.status();
  ASSERT_EQ(times->size(), 10001u);
  const double rate = 10000.0 / times->back();
  EXPECT_NEAR(rate, 50.0, 50.0 * 0.03);
  // Exponential gaps: variance = mean^2 (coefficient of variation 1).
  const GapStats s = Gaps(*times);
  EXPECT_NEAR(s.variance / (s.mean * s.mean), 1.0, 0.06);
  for (size_t i = 1; i < times->size(); ++i) ASSERT_GE((*times)[i], (*times)[i - 1]);
  EXPECT_EQ(times->front(), 0.0);
  EXPECT_GT((*times)[1], 0.0);
}

TEST(ArrivalsTest, GammaVarianceMatchesBurstiness) {
  for (double burstiness : {0.25, 0.5, 2.0, 4.0}) {
    ArrivalOptions options;
    options.request_rate = 20.0;
    options.process = ArrivalProcess::kGamma;
    options.burstiness = burstiness;
    options.seed = 11;
    auto times = ArrivalSchedule(options, 10001);
    ASSERT_TRUE(times.ok());
    const GapStats s = Gaps(*times);
    EXPECT_NEAR(1.0 / s.mean, 20.0, 20.0 * 0.05) << burstiness;
    // Gamma(k, θ): variance / mean^2 = 1 / k.
    const double cv2 = s.variance / (s.mean * s.mean);
    EXPECT_NEAR(cv2 * burstiness, 1.0, 0.1) << burstiness;
  }
}

TEST(ArrivalsTest, SameSeedSameScheduleDifferentSeedDifferent) {
  ArrivalOptions options;
  options.request_rate = 5.0;
  options.seed = 3;
  auto a = ArrivalSchedule(options, 100);
  auto b = ArrivalSchedule(options, 100);
  options.seed = 4;
  auto c = ArrivalSchedule(options, 100);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(ArrivalsTest, PoissonIgnoresBurstiness) {
  ArrivalOptions options;
  options.request_rate = 5.0;
  options.burstiness = 0.1;
  auto a = ArrivalSchedule(options, 50);
  options.burstiness = 1.0;
  options.process = ArrivalProcess::kGamma;
  auto b = ArrivalSchedule(options, 50);
  EXPECT_EQ(*a, *b);
}

TEST(ArrivalsTest, InfiniteRateSendsAllAtOnce) {
  ArrivalOptions options;
  options.request_rate = std::numeric_limits<double>::infinity();
  auto times = ArrivalSchedule(options, 5);
  ASSERT_TRUE(times.ok());
  EXPECT_EQ(*times, std::vector<double>(5, 0.0));
}

TEST(ArrivalsTest, RejectsBadArguments) {
  ArrivalOptions options;
  options.request_rate = 0;
  EXPECT_FALSE(ArrivalSchedule(options, 3).ok());
  options.request_rate = 1;
  options.process = ArrivalProcess::kGamma;
  options.burstiness = 0;
  EXPECT_FALSE(ArrivalSchedule(options, 3).ok());
  EXPECT_FALSE(ParseArrivalProcess("uniform").ok());
  EXPECT_EQ(*ParseArrivalProcess("gamma"), ArrivalProcess::kGamma);
}

}  // namespace
}  // namespace blossom
