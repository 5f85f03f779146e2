// The command-line flags of CudaKernelOptions (model_runner.h), defined once for every binary
// that loads a model on the CUDA backend (blossom-server, blossom-bench): --cuda_tensor_core_attention,
// --cuda_mma_attention, --cuda_skinny_gemm, --cuda_skinny_split_k, --cuda_skinny_mma,
// --cuda_decode_attention_threads, --cuda_register_layernorm, --cuda_programmatic_launch. Each flag's help names the
// CudaBackend::Options field it sets; a bad value is refused by CudaBackend::Create.
#ifndef BLOSSOM_ENGINE_MODEL_CUDA_KERNEL_FLAGS_H_
#define BLOSSOM_ENGINE_MODEL_CUDA_KERNEL_FLAGS_H_

#include "engine/model/model_runner.h"

namespace blossom {

// The flags' values (after absl::ParseCommandLine).
CudaKernelOptions CudaKernelOptionsFromFlags();

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_CUDA_KERNEL_FLAGS_H_
