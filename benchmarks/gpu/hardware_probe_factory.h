// Picks the HardwareProbe for a compute backend, so `blossom-bench sweep` measures the roofline's
// two ceilings on the device the model actually runs on.
//
//   "cpu"  -> CpuHardwareProbe (memcpy over the backend's threads, Blossom's CPU GEMM)
//   "cuda" -> CudaHardwareProbe on GPU `cuda_device` (device-to-device copy, cuBLASLt GEMM)
//
// This library builds everywhere: the CUDA probe is linked in only where the CUDA backend is
// (a toolkit at /usr/local/cuda and no --config=nocuda, the rule of kernels/cuda/BUILD). Elsewhere
// "cuda" is Unimplemented, as ModelRunner's "cuda" backend is.
//
// Thread-safety: the factory is stateless; the probe it returns is used by one thread at a time.
#ifndef BLOSSOM_BENCHMARKS_GPU_HARDWARE_PROBE_FACTORY_H_
#define BLOSSOM_BENCHMARKS_GPU_HARDWARE_PROBE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "benchmarks/cpu_hardware_probe.h"
#include "benchmarks/hardware_probe.h"

namespace blossom {

struct HardwareProbeFactoryOptions {
  CpuProbeOptions cpu;  // backend "cpu"
  int cuda_device = 0;  // backend "cuda": rank 0's GPU (every rank's GPU is the same model)
};

// InvalidArgument for an unknown backend; for "cuda": Unimplemented in a build without CUDA,
// FailedPrecondition (with CUDA's reason) when the GPU is not usable.
absl::StatusOr<std::unique_ptr<HardwareProbe>> MakeHardwareProbe(
    const std::string& backend, const HardwareProbeFactoryOptions& options);

// Whether this binary was built with the CUDA probe.
bool CudaHardwareProbeBuiltIn();

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_GPU_HARDWARE_PROBE_FACTORY_H_
