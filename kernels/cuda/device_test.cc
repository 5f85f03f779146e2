#include "kernels/cuda/device.h"

#include "gtest/gtest.h"

namespace blossom {
namespace cuda {
namespace {

TEST(CudaDeviceTest, QueryReportsADeviceOrAReason) {
  DeviceQuery q = QueryDevices();
  if (q.count == 0) {
    EXPECT_FALSE(q.reason.empty());
    GTEST_SKIP() << "no GPU: " << q.reason;
  }
  EXPECT_TRUE(q.reason.empty());
  EXPECT_FALSE(q.name.empty());
  EXPECT_GE(q.major, 7) << "Blossom's kernels target sm_90 (and PTX for newer)";
  EXPECT_GT(q.total_memory, 0u);
}

}  // namespace
}  // namespace cuda
}  // namespace blossom
