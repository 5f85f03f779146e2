#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

namespace blossom {
namespace cuda {

DeviceQuery QueryDevices() {
  DeviceQuery q;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    q.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return q;
  }
  if (count == 0) {
    q.reason = "no CUDA device visible";
    return q;
  }
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    q.reason = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err);
    return q;
  }
  q.count = count;
  q.name = prop.name;
  q.major = prop.major;
  q.minor = prop.minor;
  q.total_memory = prop.totalGlobalMem;
  return q;
}

}  // namespace cuda
}  // namespace blossom
