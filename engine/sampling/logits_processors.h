// Logits processors: steps 1-8 of the processing order in sampler.h, on one CPU row of fp32
// logits. Masks, logit_bias and the repetition/frequency/presence penalties (steps 1-3), then either
// greedy's argmax or temperature, top_k, top_p, typical_p and min_p (steps 4-8), leaving in a
// SamplerScratch the distribution that Sample() draws from.
//
// These are the pieces Sample() (sampler.h) is made of, kept apart from the draw and the logprobs
// because they are most of the code and change for different reasons (a new filter, a faster
// boundary search) than token selection does. Most callers want Sample(); SamplingDistribution()
// is the processors' result in a form a caller can inspect. The algorithms, costs and tie rules
// are documented in sampler.h.
#ifndef BLOSSOM_ENGINE_SAMPLING_LOGITS_PROCESSORS_H_
#define BLOSSOM_ENGINE_SAMPLING_LOGITS_PROCESSORS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/sampling/sampling_params.h"

namespace blossom {

struct TokenProbability {
  int32_t token;
  double probability;
};

// Token history the processing steps need. Views: the caller keeps the storage alive for the call.
struct SamplingContext {
  absl::Span<const int32_t> prompt_tokens;
  absl::Span<const int32_t> output_tokens;
  // Forced to -inf first, e.g. EOS and stop ids while below min_new_tokens
  // (StopChecker::SuppressedTokens).
  absl::Span<const int32_t> suppressed_tokens;
  // The token that ends the output (EOS, unless ignore_eos); -1 for none. Guided choice allows
  // it once the output equals a choice.
  int32_t end_token = -1;
};

// InvalidArgument "<name>[i] = <id> is outside the vocabulary [0, <vocab>)" for the first id
// outside it: the check every sampler makes of the token ids a request carries.
absl::Status CheckTokenIds(absl::Span<const int32_t> ids, const char* name, size_t vocab);

// FailedPrecondition for a row whose every logit is -inf after steps 1-3 (Sample()'s error).
absl::Status NothingToSampleError();

// Reusable buffers for Sample(), so that the per-token path does not allocate vocabulary-sized
// memory once warmed up. Holds no state that affects results: any scratch can serve any request.
// Not thread-safe: one per sampling thread.
class SamplerScratch {
 public:
  SamplerScratch() = default;
  SamplerScratch(const SamplerScratch&) = delete;
  SamplerScratch& operator=(const SamplerScratch&) = delete;

 private:
  friend class LogitsProcessors;  // logits_processors.cc: steps 1-8
  friend class SamplerImpl;       // sampler.cc: the draw and the logprobs
  struct Candidate {
    int32_t id;
    float x;  // (processed logit - max) / temperature: <= 0.
    float w;  // exp(x): unnormalised probability.
  };
  std::vector<float> logits_;  // processed logits, vocab-sized
  // Dense form (top_k off): x and w for every token, and sums of w per block and in total.
  std::vector<float> xs_;
  std::vector<float> weights_;
  std::vector<double> block_sums_;
  double total_weight_ = 0.0;
  std::vector<Candidate> candidates_;  // explicit survivors
  std::vector<Candidate> boundary_;    // tokens of the histogram bin holding a mass boundary
  std::vector<double> bin_mass_;
  std::vector<int32_t> bin_count_;
  // Vocab-sized and all zero between calls: penalties touch only history tokens and reset them.
  std::vector<int32_t> counts_;
  std::vector<uint8_t> seen_;
  std::vector<int32_t> choice_next_;  // guided choice: the tokens a step allows; then bad-word bans
};

// Steps 1-3: copies `logits` into `scratch`, checks it and applies suppression and penalties.
// Errors as Sample()'s, except FailedPrecondition, which comes from the next step.
absl::Status PrepareLogits(absl::Span<const float> logits, const SamplingParams& params,
                           const SamplingContext& ctx, SamplerScratch& scratch);

// Step 4, greedy, on the row PrepareLogits left: the first maximum, so ties go to the lowest id.
// FailedPrecondition when every token is -inf.
absl::StatusOr<int32_t> GreedyToken(const SamplerScratch& scratch);

// True when steps 1-3 leave the row as it is: no masks, no logit_bias, no penalties.
bool RowIsUnedited(const SamplingParams& params, const SamplingContext& ctx);

// Steps 1-4 for a greedy request with RowIsUnedited: the same checks, errors and token as
// PrepareLogits then GreedyToken, reading `logits` in place instead of copying the row.
absl::StatusOr<int32_t> UneditedGreedyToken(absl::Span<const float> logits,
                                            const SamplingParams& params,
                                            const SamplingContext& ctx);

// Steps 4 (temperature) to 8 on the row PrepareLogits left. Returns true when the survivors are
// the dense form (every token with a nonzero weight; nothing was filtered), false when they are
// the scratch's explicit candidate list. FailedPrecondition when every token is -inf.
absl::StatusOr<bool> FilterLogits(const SamplingParams& params, SamplerScratch& scratch);

// The distribution Sample() (sampler.h) draws from after steps 1-8: the tokens with nonzero
// probability, by ascending id, probabilities summing to 1 (greedy: the argmax with probability
// 1). Same errors as Sample(). For tests, debugging and callers that draw several tokens from one
// row.
absl::StatusOr<std::vector<TokenProbability>> SamplingDistribution(absl::Span<const float> logits,
                                                                   const SamplingParams& params,
                                                                   const SamplingContext& ctx,
                                                                   SamplerScratch& scratch);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_LOGITS_PROCESSORS_H_
