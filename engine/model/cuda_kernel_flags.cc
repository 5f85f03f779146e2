#include "engine/model/cuda_kernel_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"

ABSL_FLAG(bool, cuda_tensor_core_attention, true,
          "--backend cuda: prefill attention of f16/bf16 models on tensor cores (false: the "
          "CUDA-core kernel).");
ABSL_FLAG(bool, cuda_mma_attention, true,
          "--backend cuda, with --cuda_tensor_core_attention: prefill attention on the "
          "register-accumulator (mma.sync) kernel for head sizes 64/80/96/128 (false: the WMMA "
          "kernel).");
ABSL_FLAG(bool, cuda_skinny_gemm, true,
          "--backend cuda: linears of decode steps with up to 8 sequences on the skinny GEMM (a "
          "batched GEMV streaming the weights once) where it measured faster than cuBLASLt at the "
          "warm-up (always, with --cuda_time_gemm=false); false: cuBLASLt only.");
ABSL_FLAG(bool, cuda_skinny_split_k, false,
          "--backend cuda, with --cuda_skinny_gemm: the split-K skinny GEMM (4x the warps for "
          "shapes of few columns and long K) as a candidate at the warm-up's timing (without "
          "timing: instead of the whole-K one).");
ABSL_FLAG(bool, cuda_skinny_mma, false,
          "--backend cuda, with --cuda_skinny_gemm: the tensor-core skinny GEMM (f16/bf16, decode "
          "steps of up to 16 sequences) as a candidate at the warm-up's timing (without timing: "
          "wherever it applies).");
ABSL_FLAG(int32_t, cuda_decode_attention_threads, 128,
          "--backend cuda: threads per decode attention block: 128, 256 or 512 (more keys' loads "
          "in flight per block at long contexts).");
ABSL_FLAG(bool, cuda_register_layernorm, false,
          "--backend cuda: LayerNorm rows held in registers (one round of loads; the same "
          "results).");
ABSL_FLAG(bool, cuda_programmatic_launch, false,
          "--backend cuda: decode-step kernels with programmatic dependent launch (each may be "
          "scheduled while the one before it finishes; the same results).");

namespace blossom {

CudaKernelOptions CudaKernelOptionsFromFlags() {
  CudaKernelOptions kernels;
  kernels.tensor_core_attention = absl::GetFlag(FLAGS_cuda_tensor_core_attention);
  kernels.mma_prefill_attention = absl::GetFlag(FLAGS_cuda_mma_attention);
  kernels.skinny_gemm = absl::GetFlag(FLAGS_cuda_skinny_gemm);
  kernels.skinny_split_k = absl::GetFlag(FLAGS_cuda_skinny_split_k);
  kernels.skinny_mma = absl::GetFlag(FLAGS_cuda_skinny_mma);
  kernels.decode_attention_threads = absl::GetFlag(FLAGS_cuda_decode_attention_threads);
  kernels.register_layernorm = absl::GetFlag(FLAGS_cuda_register_layernorm);
  kernels.programmatic_launch = absl::GetFlag(FLAGS_cuda_programmatic_launch);
  return kernels;
}

}  // namespace blossom
