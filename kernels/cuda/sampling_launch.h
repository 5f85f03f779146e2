// Device-side interface of the batched GPU sampler (internal to kernels/cuda; cuda_sampling.h is
// the public API). Kept free of everything but the CUDA runtime header.
#ifndef BLOSSOM_KERNELS_CUDA_SAMPLING_LAUNCH_H_
#define BLOSSOM_KERNELS_CUDA_SAMPLING_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace blossom {
namespace cuda {

// One row's sampling parameters; the layout is shared by host and device (plain data).
struct RowSamplingParams {
  float temperature = 1.0f;          // 0 = greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;                 // <= 0 or >= vocab: off
  float top_p = 1.0f;                // (0, 1]; 1 = off
  float repetition_penalty = 1.0f;   // HF/CTRL, over prompt and output tokens, each id once
  float frequency_penalty = 0.0f;    // OpenAI, count of the id in the output tokens
  float presence_penalty = 0.0f;     // OpenAI, once if the id occurs in the output tokens
  uint64_t seed = 0;                 // Philox key
  uint64_t offset = 0;               // Philox counter: e.g. tokens sampled so far by the request
};

struct SamplingLaunchArgs {
  float* logits = nullptr;  // [rows, vocab] fp32, modified in place (penalties)
  int32_t rows = 0;
  int64_t vocab = 0;
  const RowSamplingParams* params = nullptr;  // device [rows]
  // Token histories as CSR on the device: row r's tokens are tokens[start[r], start[r+1]).
  const int32_t* prompt_tokens = nullptr;
  const int32_t* prompt_start = nullptr;  // [rows + 1]; null: no prompt tokens
  const int32_t* output_tokens = nullptr;
  const int32_t* output_start = nullptr;  // [rows + 1]; null: no output tokens
  int32_t* out_tokens = nullptr;          // device [rows]
  // Whether any row has a penalty (repetition != 1, frequency or presence != 0): false skips
  // the penalty kernel, which would change nothing.
  bool any_penalty = true;
};

cudaError_t LaunchSampling(const SamplingLaunchArgs& args, cudaStream_t stream);

// The uniform in [0, 1) the sampler draws for (seed, offset): exposed so tests can predict draws.
float PhiloxUniform(uint64_t seed, uint64_t offset);

}  // namespace cuda
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_SAMPLING_LAUNCH_H_
