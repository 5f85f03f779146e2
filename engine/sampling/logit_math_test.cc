// logit_math.h on its own: the accuracy and the exact zeros that sampler.h documents, and that
// the vector path computes what the scalar one does, so that a token's weight does not depend on
// where it falls in the row.
#include "engine/sampling/logit_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace logit_math {
namespace {

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

TEST(LogitMathTest, ExpNonPositiveIsAccurateAboveTheUnderflow) {
  double worst = 0.0;
  for (float x = 0.0f; x > -87.0f; x -= 0.00137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(ExpNonPositive(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
}

TEST(LogitMathTest, ExpNonPositiveIsExactlyZeroBelowTheFloor) {
  EXPECT_EQ(ExpNonPositive(-kInf), 0.0f);
  EXPECT_EQ(ExpNonPositive(-88.0f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-1e30f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-126.5f * std::log(2.0f) - 1e-3f), 0.0f);
  EXPECT_GT(ExpNonPositive(-87.0f), 0.0f);
}

TEST(LogitMathTest, MaxOfMatchesMaxElementForEveryTailLength) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (size_t n = 1; n <= 41; ++n) {
    std::vector<float> row(n);
    for (float& v : row) v = normal(gen);
    row[gen() % n] = -kInf;
    EXPECT_EQ(MaxOf(row.data(), n), *std::max_element(row.begin(), row.end())) << "n=" << n;
  }
  const std::vector<float> masked = {-kInf, -kInf, -kInf, -kInf, -kInf};
  EXPECT_EQ(MaxOf(masked.data(), masked.size()), -kInf);
  EXPECT_EQ(MaxOf(nullptr, 0), -kInf);
}

// Rows that span several blocks and end mid-run exercise the vector runs, the scalar tail and the
// block sums together.
TEST(LogitMathTest, ExpWeightsAgreesWithTheScalarPathBitForBit) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{1000}, kBlock, 3 * kBlock + 77}) {
    for (float temperature : {1.0f, 0.3f, 7.0f}) {
      std::vector<float> row(n);
      for (float& v : row) v = normal(gen);
      if (n > 1) row[n / 2] = -kInf;  // a masked token; n = 1 would mask the whole row
      const float max = MaxOf(row.data(), n);
      std::vector<float> x(n), w(n);
      std::vector<double> blocks((n + kBlock - 1) / kBlock);
      const double total =
          ExpWeights<true>(row.data(), n, max, temperature, x.data(), w.data(), blocks.data());
      double block_total = 0.0;
      for (double b : blocks) block_total += b;
      EXPECT_EQ(total, block_total);
      EXPECT_EQ(total, ExpWeights<false>(row.data(), n, max, temperature, nullptr, nullptr,
                                         nullptr));
      for (size_t i = 0; i < n; ++i) {
        const float want_x = (row[i] - max) / temperature;
        ASSERT_EQ(Bits(x[i]), Bits(want_x)) << "n=" << n << " i=" << i;
        ASSERT_EQ(Bits(w[i]), Bits(ExpNonPositive(want_x))) << "n=" << n << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace logit_math
}  // namespace blossom
