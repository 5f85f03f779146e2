#include "kernels/cpu/cpu_budget.h"

#include <sched.h>

#include <thread>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(CpuBudgetTest, CgroupV2QuotaRoundsUp) {
  EXPECT_EQ(CpusFromCgroupV2CpuMax("400000 100000\n"), 4);
  EXPECT_EQ(CpusFromCgroupV2CpuMax("150000 100000"), 2);
  EXPECT_EQ(CpusFromCgroupV2CpuMax("50000 100000"), 1);
  EXPECT_EQ(CpusFromCgroupV2CpuMax("max 100000\n"), std::nullopt);
  for (const char* bad : {"", "400000", "400000 0", "-1 100000", "4e5 100000", "400000 x"}) {
    EXPECT_EQ(CpusFromCgroupV2CpuMax(bad), std::nullopt) << bad;
  }
}

TEST(CpuBudgetTest, CgroupV1QuotaRoundsUp) {
  EXPECT_EQ(CpusFromCgroupV1Quota("200000\n", "100000\n"), 2);
  EXPECT_EQ(CpusFromCgroupV1Quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupV1Quota("", ""), std::nullopt);
}

// The affinity mask bounds the count: a process pinned to one core gets one.
TEST(CpuBudgetTest, AffinityBoundsTheCount) {
  const int all = UsableCpus();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &saved)) first = c;
  }
  ASSERT_GE(first, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(UsableCpus(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(UsableCpus(), all);
}

}  // namespace
}  // namespace blossom
