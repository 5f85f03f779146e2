#include "benchmarks/cpu_hardware_probe.h"

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Only that the probes run and return usable numbers: their speed is a benchmark's business.
TEST(CpuHardwareProbeTest, MeasuresPositiveRates) {
  CpuProbeOptions options;
  options.threads = 2;
  options.copy_bytes = 4 << 20;
  options.repetitions = 1;
  options.gemm_m = 4;
  options.gemm_n = 64;
  options.gemm_k = 64;
  CpuHardwareProbe probe(options);
  EXPECT_EQ(probe.Describe(), "cpu, 2 threads");
  absl::StatusOr<double> bandwidth = probe.MeasureCopyBandwidth();
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.status();
  EXPECT_GT(*bandwidth, 0.0);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    absl::StatusOr<double> flops = probe.MeasureGemmFlops(dtype);
    ASSERT_TRUE(flops.ok()) << flops.status();
    EXPECT_GT(*flops, 0.0);
  }
  EXPECT_FALSE(probe.MeasureGemmFlops(DType::kI32).ok());
}

class FixedProbe : public HardwareProbe {
 public:
  std::string Describe() const override { return "fixed"; }
  absl::StatusOr<double> MeasureCopyBandwidth() override {
    ++calls;
    return 5e9;
  }
  absl::StatusOr<double> MeasureGemmFlops(DType) override {
    ++calls;
    return 7e9;
  }
  int calls = 0;
};

TEST(ResolveHardwareRatesTest, OverridesWinAndSkipTheProbe) {
  FixedProbe probe;
  absl::StatusOr<HardwareRates> measured = ResolveHardwareRates(&probe, DType::kBF16, {});
  ASSERT_TRUE(measured.ok());
  EXPECT_EQ(measured->mem_bytes_per_s, 5e9);
  EXPECT_EQ(measured->gemm_flops_per_s, 7e9);
  EXPECT_EQ(probe.calls, 2);
  EXPECT_EQ(measured->mem_source.rfind("measured", 0), 0u);

  HardwareOverrides overrides;
  overrides.mem_bandwidth_gbs = 2000;
  overrides.peak_tflops = 989;
  absl::StatusOr<HardwareRates> given = ResolveHardwareRates(nullptr, DType::kBF16, overrides);
  ASSERT_TRUE(given.ok());
  EXPECT_DOUBLE_EQ(given->mem_bytes_per_s, 2e12);
  EXPECT_DOUBLE_EQ(given->gemm_flops_per_s, 989e12);
  EXPECT_EQ(given->flops_source, "override: --peak-tflops");

  overrides.peak_tflops = 0;
  EXPECT_FALSE(ResolveHardwareRates(nullptr, DType::kBF16, overrides).ok());
  absl::StatusOr<HardwareRates> mixed = ResolveHardwareRates(&probe, DType::kBF16, overrides);
  ASSERT_TRUE(mixed.ok());
  EXPECT_DOUBLE_EQ(mixed->mem_bytes_per_s, 2e12);
  EXPECT_EQ(mixed->gemm_flops_per_s, 7e9);
}

}  // namespace
}  // namespace blossom
