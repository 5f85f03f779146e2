// HardwareProbe for the CPU backend: memcpy bandwidth over the backend's threads, and the rate
// of the backend's own GEMM (kernels/cpu/gemm.h), which is what the forward pass runs: the
// roofline then says how close a step comes to what this code can do on this machine, not to a
// vendor BLAS peak.
//
// Thread-safety: one caller at a time (the measurements use the internal thread pool).
#ifndef BLOSSOM_BENCHMARKS_CPU_HARDWARE_PROBE_H_
#define BLOSSOM_BENCHMARKS_CPU_HARDWARE_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "benchmarks/hardware_probe.h"
#include "kernels/cpu/thread_pool.h"

namespace blossom {

struct CpuProbeOptions {
  int threads = 0;                   // <= 0: all cores (as CpuBackend)
  int64_t copy_bytes = 256ll << 20;  // well past the last-level cache
  int repetitions = 5;               // best of
  // GEMM shape: out[m, n] = x[m, k] * w[n, k]^T; n, k like a 1k-hidden layer.
  int64_t gemm_m = 64, gemm_n = 1024, gemm_k = 1024;
};

class CpuHardwareProbe : public HardwareProbe {
 public:
  explicit CpuHardwareProbe(const CpuProbeOptions& options = {});
  ~CpuHardwareProbe() override;

  std::string Describe() const override;
  absl::StatusOr<double> MeasureCopyBandwidth() override;
  absl::StatusOr<double> MeasureGemmFlops(DType weight_dtype) override;

 private:
  CpuProbeOptions options_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_CPU_HARDWARE_PROBE_H_
