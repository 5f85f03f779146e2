#include "benchmarks/gpu/hardware_probe_factory.h"

#include "gtest/gtest.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace blossom {
namespace {

TEST(HardwareProbeFactoryTest, CpuBackendGetsTheCpuProbe) {
  HardwareProbeFactoryOptions options;
  options.cpu.threads = 2;
  absl::StatusOr<std::unique_ptr<HardwareProbe>> probe = MakeHardwareProbe("cpu", options);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ((*probe)->Describe(), "cpu, 2 threads");
}

TEST(HardwareProbeFactoryTest, UnknownBackendIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<HardwareProbe>> probe = MakeHardwareProbe("tpu", {});
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(probe.status().message().find("tpu"), absl::string_view::npos);
}

// Runs in CI (no GPU): "cuda" must fail cleanly there, and work where a GPU is.
TEST(HardwareProbeFactoryTest, CudaBackendDependsOnBuildAndDevice) {
  absl::StatusOr<std::unique_ptr<HardwareProbe>> probe = MakeHardwareProbe("cuda", {});
#ifdef BLOSSOM_HAVE_CUDA
  EXPECT_TRUE(CudaHardwareProbeBuiltIn());
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count == 0) {
    ASSERT_FALSE(probe.ok());
    EXPECT_EQ(probe.status().code(), absl::StatusCode::kFailedPrecondition) << probe.status();
  } else {
    ASSERT_TRUE(probe.ok()) << probe.status();
    EXPECT_EQ((*probe)->Describe().rfind("cuda device 0: ", 0), 0u) << (*probe)->Describe();
  }
#else
  EXPECT_FALSE(CudaHardwareProbeBuiltIn());
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), absl::StatusCode::kUnimplemented);
#endif
}

}  // namespace
}  // namespace blossom
