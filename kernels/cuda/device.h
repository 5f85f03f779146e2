// CUDA device discovery, used by GPU tests and the server to decide what can run here.
//
// Kept free of CUDA headers so that host code (and tests) can include it. On a machine without
// a GPU or driver, DeviceCount() reports 0 with the reason, which GPU tests print as SKIPPED.
// Thread-safe.
#ifndef BLOSSOM_KERNELS_CUDA_DEVICE_H_
#define BLOSSOM_KERNELS_CUDA_DEVICE_H_

#include <string>

namespace blossom {
namespace cuda {

struct DeviceQuery {
  int count = 0;
  // Why no device is usable (driver missing, no GPU, ...); empty when count > 0.
  std::string reason;
  // Name and compute capability of device 0, when present.
  std::string name;
  int major = 0, minor = 0;
  size_t total_memory = 0;
};

DeviceQuery QueryDevices();

}  // namespace cuda
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_DEVICE_H_
