#include "benchmarks/gpu/cuda_hardware_probe.h"

#include "gtest/gtest.h"
#include "kernels/cuda/device.h"

namespace blossom {
namespace {

TEST(CudaHardwareProbeTest, RejectsBadOptionsWithoutTouchingTheDevice) {
  CudaProbeOptions options;
  options.repetitions = 0;
  absl::StatusOr<std::unique_ptr<CudaHardwareProbe>> probe = CudaHardwareProbe::Create(options);
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaHardwareProbeTest, NoGpuIsAFailedPreconditionNotACrash) {
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count > 0) GTEST_SKIP() << "a GPU is present (" << q.name << ")";
  absl::StatusOr<std::unique_ptr<CudaHardwareProbe>> probe = CudaHardwareProbe::Create({});
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), absl::StatusCode::kFailedPrecondition) << probe.status();
}

// Sanity bounds, not a benchmark: anything Blossom targets (sm_90) copies at hundreds of GB/s
// and multiplies bf16 at hundreds of TFLOP/s; the bounds only catch unit or timing mistakes
// (ms vs s, bytes counted once, a GEMM that did not run). The default shapes take ~0.1 s on an
// H100.
TEST(CudaHardwareProbeTest, MeasuresPlausibleRatesOnTheGpu) {
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
  absl::StatusOr<std::unique_ptr<CudaHardwareProbe>> probe = CudaHardwareProbe::Create({});
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_NE((*probe)->Describe().find(q.name), std::string::npos) << (*probe)->Describe();

  absl::StatusOr<double> bandwidth = (*probe)->MeasureCopyBandwidth();
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.status();
  std::cout << "BLOSSOM_PROBE copy_read_plus_write_GBps=" << *bandwidth / 1e9 << std::endl;
  EXPECT_GT(*bandwidth, 100e9);
  EXPECT_LT(*bandwidth, 20e12);

  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    absl::StatusOr<double> flops = (*probe)->MeasureGemmFlops(dtype);
    ASSERT_TRUE(flops.ok()) << DTypeName(dtype) << ": " << flops.status();
    std::cout << "BLOSSOM_PROBE gemm_" << DTypeName(dtype) << "_TFLOPs=" << *flops / 1e12
              << std::endl;
    EXPECT_GT(*flops, 1e12) << DTypeName(dtype);
    EXPECT_LT(*flops, 5e15) << DTypeName(dtype);
  }
  EXPECT_EQ((*probe)->MeasureGemmFlops(DType::kI32).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaHardwareProbeTest, TooLargeACopyIsResourceExhausted) {
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
  CudaProbeOptions options;
  options.copy_bytes = static_cast<int64_t>(q.total_memory);  // two of these cannot fit
  absl::StatusOr<std::unique_ptr<CudaHardwareProbe>> probe = CudaHardwareProbe::Create(options);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ((*probe)->MeasureCopyBandwidth().status().code(),
            absl::StatusCode::kResourceExhausted);
  // The failed allocation left no sticky error: the probe still works.
  options.copy_bytes = 64 << 20;
  probe = CudaHardwareProbe::Create(options);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_TRUE((*probe)->MeasureCopyBandwidth().ok());
}

}  // namespace
}  // namespace blossom
