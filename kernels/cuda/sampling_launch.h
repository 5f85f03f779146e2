// Device-side interface of the batched GPU sampler (internal to kernels/cuda; cuda_sampling.h is
// the public API). Kept free of everything but the CUDA runtime header.
#ifndef BLOSSOM_KERNELS_CUDA_SAMPLING_LAUNCH_H_
#define BLOSSOM_KERNELS_CUDA_SAMPLING_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace blossom {
namespace cuda {

// The most top logprobs a row may ask for (cuda_sampling.h's kMaxTopLogprobs).
inline constexpr int kRowTopLogprobs = 20;

// One logprob row's result, written on the device. Logprobs are the log-softmax of the RAW row,
// before the penalties: logprob(v) = max(double(v) - max_logit - log_sum, -FLT_MAX).
struct RowLogprobs {
  double log_sum = 0.0;   // log(sum of exp(v - max_logit)) over the row's finite logits
  float max_logit = 0.0f;
  float chosen = 0.0f;    // the sampled token's logprob (set after the draw)
  int32_t nonfinite = 0;  // 1: the row holds a NaN or +inf (a model fault); nothing else holds
  int32_t count = 0;      // top entries filled: min(logprobs, finite logits)
  int32_t rank = 0;       // scoring only: entries whose logit is >= the token's, itself included
  int32_t top_ids[kRowTopLogprobs] = {};  // by raw logit descending, ties to the lowest id
  float top_logprobs[kRowTopLogprobs] = {};
};

// One logit_bias entry (the layout of cuda_sampling.h's TokenBias).
struct RowBias {
  int32_t token;
  float bias;
};

// One row's sampling parameters; the layout is shared by host and device (plain data).
struct RowSamplingParams {
  float temperature = 1.0f;          // 0 = greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;                 // <= 0 or >= vocab: off
  float top_p = 1.0f;                // (0, 1]; 1 = off
  float repetition_penalty = 1.0f;   // HF/CTRL, over prompt and output tokens, each id once
  float frequency_penalty = 0.0f;    // OpenAI, count of the id in the output tokens
  float presence_penalty = 0.0f;     // OpenAI, once if the id occurs in the output tokens
  int32_t logprobs = -1;             // -1: none; else how many top logprobs, <= kRowTopLogprobs
  float typical_p = 1.0f;            // (0, 1]; 1 = off
  float min_p = 0.0f;                // [0, 1]; 0 = off
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
  // Step 1's edits, applied before the penalties (any_edits false: no row has any, and the
  // pointers may be null): per row, the ids whose bit is clear in its allow bitmask (words
  // [allowed_offset[r], + ceil(vocab / 64)); offset -1: no mask) and its banned ids -> -inf, then
  // its biases added. Banned ids and biases are CSR like the token histories.
  const int64_t* allowed_offset = nullptr;  // [rows]
  const uint64_t* allowed_words = nullptr;
  const int32_t* banned_start = nullptr;    // [rows + 1]
  const int32_t* banned_tokens = nullptr;
  const int32_t* bias_start = nullptr;      // [rows + 1]
  const RowBias* bias = nullptr;
  bool any_edits = false;
  // With any_edits: per row, whether an id the edits overwrote held a NaN or +inf (written by
  // the edit kernel for every row, read by the sample kernel); else null.
  int32_t* nonfinite_rows = nullptr;
  // Logprobs (null when no row has params.logprobs >= 0): results per row, and scratch that keeps
  // the raw logits the edits and penalties overwrite before the draw: those of the history tokens
  // of the logprob rows with penalties (aligned with prompt_tokens / output_tokens) and those of
  // the biased tokens (aligned with bias).
  RowLogprobs* out_logprobs = nullptr;  // device [rows]
  float* raw_prompt = nullptr;          // device, as prompt_tokens
  float* raw_output = nullptr;          // device, as output_tokens
  float* raw_bias = nullptr;            // device, as bias
  // Whether any row has a penalty (repetition != 1, frequency or presence != 0): false skips
  // the penalty kernel, which would change nothing.
  bool any_penalty = true;
};

// Edits, penalties, then the draw; with out_logprobs, LaunchLogprobStats before the edits and
// LaunchChosenLogprobs after the draw.
cudaError_t LaunchSampling(const SamplingLaunchArgs& args, cudaStream_t stream);

// logit_edits.cu: step 1's edits of every row that has some.
cudaError_t LaunchLogitEdits(const SamplingLaunchArgs& args, cudaStream_t stream);

// logprobs.cu. Stats: per logprob row, on the raw logits, the max, log_sum, top ids and
// logprobs and the nonfinite flag, and the raw logits of penalised history tokens. Chosen: the
// sampled token's logprob from the stats and the raw logit (from the scratch where a penalty
// overwrote it). Rows with logprobs < 0 are left alone.
cudaError_t LaunchLogprobStats(const SamplingLaunchArgs& args, cudaStream_t stream);

// One row to score against a known token (prompt logprobs).
struct ScoreEntry {
  int64_t row = 0;      // logit row
  int32_t token = 0;    // in [0, vocab)
  int32_t top_n = 0;    // [0, kRowTopLogprobs]
};

struct ScoringLaunchArgs {
  const float* logits = nullptr;  // [rows, vocab] fp32, read only
  int64_t vocab = 0;
  int32_t count = 0;
  const ScoreEntry* entries = nullptr;  // device [count]
  RowLogprobs* out = nullptr;           // device [count]: chosen = the token's logprob, rank
};

// logprobs.cu: the raw logprob and rank of each entry's token and its row's top n.
cudaError_t LaunchScoring(const ScoringLaunchArgs& args, cudaStream_t stream);
cudaError_t LaunchChosenLogprobs(const SamplingLaunchArgs& args, cudaStream_t stream);

// The uniform in [0, 1) the sampler draws for (seed, offset): exposed so tests can predict draws.
float PhiloxUniform(uint64_t seed, uint64_t offset);

}  // namespace cuda
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_SAMPLING_LAUNCH_H_
