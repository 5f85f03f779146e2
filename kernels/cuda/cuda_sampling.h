// Batched token sampling on the GPU, over fp32 logits already in device memory.
//
// One call samples one token per row, each row with its own parameters (greedy, temperature,
// top-k, top-p, typical-p, min-p, repetition / frequency / presence penalties) and its own Philox4x32-10 stream
// addressed by (seed, offset): the same (logits, params, seed, offset) always gives the same
// token, independent of the batch it is in, so a request can be replayed or preempted and resumed
// by passing offset = number of tokens it has sampled so far.
//
// A row may also ask for logprobs: the raw log-softmax (before penalties) of its drawn token and
// of its top n tokens, n <= kMaxTopLogprobs, as the CPU sampler reports them (logprobs.cu); only
// these come back to the host, not the row.
//
// Masks, bans and biases (step 1 of the engine's order) arrive as data: an allow bitmask, banned
// ids and (id, bias) pairs per row, built on the host by engine/sampling/logit_edits.
//
// Thread-safety: a CudaSampler is used by one thread at a time (it owns staging buffers).
#ifndef BLOSSOM_KERNELS_CUDA_CUDA_SAMPLING_H_
#define BLOSSOM_KERNELS_CUDA_CUDA_SAMPLING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace blossom {
namespace cuda {

// One logit_bias entry.
struct TokenBias {
  int32_t token;
  float bias;
};

// Per-row parameters, as the engine's SamplingParams names them.
struct SamplingRow {
  float temperature = 1.0f;         // 0 = greedy: the first maximum (lowest id on ties)
  int32_t top_k = 0;                // <= 0: off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float typical_p = 1.0f;           // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off; prompt and output ids, each id once
  float frequency_penalty = 0.0f;   // output ids: logit -= count * frequency_penalty
  float presence_penalty = 0.0f;    // output ids: logit -= presence_penalty once
  uint64_t seed = 0;
  uint64_t offset = 0;              // which draw of this seed's stream (tokens sampled so far)
  int32_t logprobs = -1;            // -1: none; else [0, kMaxTopLogprobs] top logprobs as well
  // Token histories for the penalties (host memory, read during Sample()).
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> output_tokens;
  // Step 1's edits (engine/sampling/logit_edits.h), applied before the penalties: every id whose
  // bit in `allowed` is clear (when not empty: exactly ceil(vocab / 64) words, read during
  // Sample()) and every `banned` id -> -inf, then each `bias` added (distinct tokens).
  absl::Span<const uint64_t> allowed;
  std::vector<int32_t> banned;
  std::vector<TokenBias> bias;
};

// The most top logprobs a row may ask for.
inline constexpr int32_t kMaxTopLogprobs = 20;

// CudaSampler::Sample's token for a row with nothing to draw.
inline constexpr int32_t kNoToken = -1;
// CudaSampler::Sample's token for a row holding a NaN or +inf logit (a model fault).
inline constexpr int32_t kNonFiniteRow = -2;

// The logprobs of one row that asked for them (SamplingRow::logprobs >= 0).
struct SampledLogprobs {
  // The row holds a NaN or +inf logit (a model fault): nothing below is meaningful, nor is the
  // row's token.
  bool nonfinite = false;
  float chosen = 0.0f;  // the drawn token's raw logprob, clamped to -FLT_MAX
  // The min(logprobs, finite logits) most likely tokens by raw logit, descending, ties to the
  // lowest id; -inf logits are left out.
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// One logits row to score against a known token (prompt logprobs).
struct ScoreRequest {
  int64_t row = 0;     // which logit row
  int32_t token = 0;   // in [0, vocab)
  int32_t top_n = 0;   // [0, kMaxTopLogprobs]
};

// Its result: sampler.h's RawLogprobs, computed on the device.
struct ScoredRow {
  bool nonfinite = false;  // a NaN or +inf in the row: nothing below is meaningful
  float logprob = 0.0f;    // the token's raw logprob, clamped to -FLT_MAX
  int32_t rank = 0;        // 1-based: the entries whose logit is >= the token's, itself included
  std::vector<int32_t> top_ids;  // as SampledLogprobs
  std::vector<float> top_logprobs;
};

class CudaSampler {
 public:
  // `stream` is the cudaStream_t the logits were produced on (CudaBackend::stream()); null means
  // the legacy default stream.
  static absl::StatusOr<std::unique_ptr<CudaSampler>> Create(void* stream);
  ~CudaSampler();
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  // Samples rows.size() tokens from logits (device, fp32, [rows, vocab], row-major) into
  // tokens[rows] (host), and (*logprobs)[r] for each row r that asks for logprobs (resized to
  // rows.size(); may be null when no row asks). The logits are modified in place by the edits
  // and penalties. Blocks until the results are on the host. A row whose logits are all -inf
  // after them gets token -1 (kNoToken), a row holding a NaN or +inf -2 (kNonFiniteRow): one
  // such row must fail only its own request.
  // InvalidArgument for bad parameters; other errors are the device's.
  absl::Status Sample(float* logits, int64_t vocab, absl::Span<const SamplingRow> rows,
                      int32_t* tokens, std::vector<SampledLogprobs>* logprobs = nullptr);

  // Scores requests against `logits` (device, fp32, [rows, vocab], read only) into (*results)
  // (resized to requests.size()), blocking until they are on the host: ~200 bytes per row come
  // back, not the row. InvalidArgument for a token or top_n out of range; other errors are the
  // device's.
  absl::Status Score(const float* logits, int64_t vocab, absl::Span<const ScoreRequest> requests,
                     std::vector<ScoredRow>* results);

  // The uniform in [0, 1) that (seed, offset) draws; exposed for tests and CPU cross-checks.
  static float Uniform(uint64_t seed, uint64_t offset);

 private:
  CudaSampler() = default;
  // Grows the device and pinned host buffers to at least `bytes`.
  absl::Status Reserve(size_t bytes);

  void* stream_ = nullptr;
  // One upload per call: [params | prompt starts | output starts | prompt ids | output ids],
  // then one download: [sampled tokens | row logprobs], each a single async transfer through the
  // pinned host mirror; then the device-only raw-logit scratch of the logprob rows.
  void* device_ = nullptr;
  void* host_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace cuda
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_CUDA_SAMPLING_H_
