// "Measured hardware" for the roofline: how fast the device can stream memory and multiply
// matrices, measured by a backend-specific probe or given by the user.
//
// HardwareProbe is the seam between the benchmark and a device: the CPU implementation
// (cpu_hardware_probe.h) times a multithreaded memcpy and the CPU GEMM; a CUDA implementation
// will time a device-to-device cudaMemcpy and a cuBLASLt bf16 GEMM behind the same interface, so
// the sweep and the roofline never change.
//
// Thread-safety: a probe is used by one thread at a time (it runs work on its device).
#ifndef BLOSSOM_BENCHMARKS_HARDWARE_PROBE_H_
#define BLOSSOM_BENCHMARKS_HARDWARE_PROBE_H_

#include <string>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace blossom {

class HardwareProbe {
 public:
  virtual ~HardwareProbe() = default;

  // One line naming the device and what the probes run ("cpu, 2 threads").
  virtual std::string Describe() const = 0;
  // Bytes per second of a large device-to-device copy, counting bytes read plus bytes written
  // (CUDA's bandwidthTest and STREAM "copy" convention).
  virtual absl::StatusOr<double> MeasureCopyBandwidth() = 0;
  // FLOP/s (2*M*N*K per GEMM) of the device's dense GEMM with weights of `weight_dtype`, at a
  // shape large enough to reach its best rate.
  virtual absl::StatusOr<double> MeasureGemmFlops(DType weight_dtype) = 0;
};

// The two rates the roofline divides by, and where each came from.
struct HardwareRates {
  double mem_bytes_per_s = 0.0;
  double gemm_flops_per_s = 0.0;
  std::string mem_source;    // "measured: ..." or "override: --mem-bandwidth-gbs"
  std::string flops_source;  // "measured: ..." or "override: --peak-tflops"
};

// User-given rates; values <= 0 mean "measure".
struct HardwareOverrides {
  double mem_bandwidth_gbs = 0.0;  // 10^9 bytes/s
  double peak_tflops = 0.0;        // 10^12 FLOP/s
};

// Overrides win; whatever is not overridden is measured with `probe` (which may then be null
// only if both are overridden).
absl::StatusOr<HardwareRates> ResolveHardwareRates(HardwareProbe* probe, DType weight_dtype,
                                                   const HardwareOverrides& overrides);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_HARDWARE_PROBE_H_
