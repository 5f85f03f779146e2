// CudaKernelOptions (model_runner.h) onto a rank's CudaBackend::Options: the one place that
// copies them, for the threads launcher (model_runner.cc) and the MPI one (mpi_runner.cc).
// Included only where BLOSSOM_HAVE_CUDA is defined.
#ifndef BLOSSOM_ENGINE_MODEL_CUDA_KERNEL_OPTIONS_H_
#define BLOSSOM_ENGINE_MODEL_CUDA_KERNEL_OPTIONS_H_

#include "engine/model/model_runner.h"
#include "kernels/cuda/cuda_backend.h"

namespace blossom {

inline CudaBackend::Options CudaBackendOptionsFor(const CudaKernelOptions& kernels, int device) {
  CudaBackend::Options options;
  options.device = device;
  options.tensor_core_attention = kernels.tensor_core_attention;
  options.mma_prefill_attention = kernels.mma_prefill_attention;
  options.skinny_gemm = kernels.skinny_gemm;
  options.skinny_split_k = kernels.skinny_split_k;
  options.skinny_mma = kernels.skinny_mma;
  options.decode_attention_threads = kernels.decode_attention_threads;
  options.register_layernorm = kernels.register_layernorm;
  options.programmatic_launch = kernels.programmatic_launch;
  return options;
}

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_CUDA_KERNEL_OPTIONS_H_
