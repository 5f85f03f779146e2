#include "benchmarks/hardware_probe.h"

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace blossom {

absl::StatusOr<HardwareRates> ResolveHardwareRates(HardwareProbe* probe, DType weight_dtype,
                                                   const HardwareOverrides& overrides) {
  HardwareRates rates;
  const bool need_probe = overrides.mem_bandwidth_gbs <= 0.0 || overrides.peak_tflops <= 0.0;
  if (need_probe && probe == nullptr) {
    return absl::FailedPreconditionError(
        "no hardware probe for this backend: give both --mem-bandwidth-gbs and --peak-tflops");
  }
  if (overrides.mem_bandwidth_gbs > 0.0) {
    rates.mem_bytes_per_s = overrides.mem_bandwidth_gbs * 1e9;
    rates.mem_source = "override: --mem-bandwidth-gbs";
  } else {
    BLOSSOM_ASSIGN_OR_RETURN(rates.mem_bytes_per_s, probe->MeasureCopyBandwidth());
    rates.mem_source =
        absl::StrCat("measured: copy bandwidth (read + write) on ", probe->Describe());
  }
  if (overrides.peak_tflops > 0.0) {
    rates.gemm_flops_per_s = overrides.peak_tflops * 1e12;
    rates.flops_source = "override: --peak-tflops";
  } else {
    BLOSSOM_ASSIGN_OR_RETURN(rates.gemm_flops_per_s, probe->MeasureGemmFlops(weight_dtype));
    rates.flops_source =
        absl::StrCat("measured: ", DTypeName(weight_dtype), "-weight GEMM on ", probe->Describe());
  }
  if (!(rates.mem_bytes_per_s > 0.0) || !(rates.gemm_flops_per_s > 0.0)) {
    return absl::InternalError("the hardware probe returned a non-positive rate");
  }
  return rates;
}

}  // namespace blossom
