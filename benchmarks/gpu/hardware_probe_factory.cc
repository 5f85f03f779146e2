#include "benchmarks/gpu/hardware_probe_factory.h"

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "benchmarks/gpu/cuda_hardware_probe.h"
#endif

namespace blossom {

bool CudaHardwareProbeBuiltIn() {
#ifdef BLOSSOM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<HardwareProbe>> MakeHardwareProbe(
    const std::string& backend, const HardwareProbeFactoryOptions& options) {
  if (backend == "cpu") return std::unique_ptr<HardwareProbe>(new CpuHardwareProbe(options.cpu));
  if (backend == "cuda") {
#ifdef BLOSSOM_HAVE_CUDA
    CudaProbeOptions cuda;
    cuda.device = options.cuda_device;
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<CudaHardwareProbe> probe,
                             CudaHardwareProbe::Create(cuda));
    return std::unique_ptr<HardwareProbe>(std::move(probe));
#else
    return absl::UnimplementedError(
        "no CUDA hardware probe in this build (built without the CUDA toolkit or with "
        "--config=nocuda)");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no hardware probe for backend '", backend, "' (expected cpu or cuda)"));
}

}  // namespace blossom
