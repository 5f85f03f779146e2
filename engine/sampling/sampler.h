// Per-request token sampling on one CPU row of fp32 logits.
//
// Processing order (HF generate / vLLM; each step sees the output of the previous one):
//   1. masks -> -inf (vLLM's order): every token outside allowed_token_ids (when given); the
//      last token of a bad-word sequence whose other tokens end the output so far; suppressed
//      tokens (SamplingContext::suppressed_tokens); with guided choice, every token but the next
//      of each choice the output is a prefix of (the end token after a whole choice); with a
//      structured-output constraint, every token it does not allow after the output so far;
//      then logit_bias is added (-inf stays -inf);
//   2. repetition_penalty over the distinct tokens of prompt + output, each once (HF/CTRL):
//      logit > 0 ? logit / penalty : logit * penalty;
//   3. frequency and presence penalties over output tokens only (OpenAI):
//      logit -= count * frequency_penalty + (count > 0) * presence_penalty;
//   4. temperature == 0: argmax of the result (ties -> lowest id); steps 5-9 are skipped and the
//      rng is not advanced. Otherwise x = (logit - max logit) / temperature in fp32 (the shift
//      changes nothing after normalisation and keeps tiny temperatures from overflowing);
//   5. top_k: keep every token whose logit is >= the k-th largest logit (ties at the boundary are
//      all kept, as HF's TopKLogitsWarper and vLLM do, so the set depends on values only). It is
//      selected on the logits of step 3, which gives the set of step 4's x as scaling is monotone;
//   6. top_p: order tokens by probability descending (by x), ties by lowest id, and keep a token
//      when the probability mass strictly before it is < top_p (HF's TopPLogitsWarper rule): the
//      smallest such prefix whose cumulative probability reaches top_p; the top token always
//      survives. Unlike HF, whose tie order is whatever torch.sort yields, boundary ties go to the
//      lowest id;
//   7. typical_p (HF's TypicalLogitsWarper): with entropy H of the current distribution, order
//      tokens by |-log p - H| ascending, find the first position whose cumulative probability
//      reaches typical_p (or the last), and keep every token whose score is <= that position's;
//   8. min_p: keep tokens with p >= min_p * max(p);
//   9. draw from the distribution renormalised over the survivors: one uniform draw from the rng,
//      inverted through the cumulative distribution (in a fixed order for given inputs: token id
//      order when nothing was filtered).
// Steps 6-8 work on probabilities renormalised over the survivors of the previous steps; weights
// are fp32 exp(x) (relative error ~1e-7) and every probability-mass sum is in double. A token
// whose weight relative to the top token is below 2^-126.5 (x more than ~87.68 below the top
// after temperature scaling) gets weight 0 in fp32 and is dropped, as it could never be drawn.
//
// Logprobs are the log-softmax of the RAW model logits, before any of the steps above (vLLM's
// default "raw_logprobs"): they describe the model rather than the sampling configuration, are the
// same for greedy and sampled requests, and a client can compare them across settings.
//
// Cost, for V tokens: a pass to copy and check the row; with top_k, a bounded-heap scan
// (O(V log k)) and work on k tokens only; without it, a vectorised exp over the row, and top_p or
// typical_p find their mass boundary with a histogram (two linear passes) and sort only the tokens
// of one histogram bin. Nothing sorts the vocabulary. No allocation of vocabulary-sized buffers
// once a SamplerScratch has warmed up.
//
// Steps 1-8 live in logits_processors.h, with SamplingContext, SamplerScratch and
// SamplingDistribution(); this header includes it, so that callers need only this one. Here: the
// per-request generator, the draw (step 9) and the logprobs.
#ifndef BLOSSOM_ENGINE_SAMPLING_SAMPLER_H_
#define BLOSSOM_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "engine/sampling/logits_processors.h"
#include "engine/sampling/sampling_params.h"

namespace blossom {

// The per-request random generator: std::mt19937_64 seeded with the request's seed, or with a
// seed drawn from std::random_device when the request has none. The standard fixes
// mt19937_64's output sequence, and Uniform() uses no implementation-defined distribution, so a
// seed reproduces the same draws on every platform and build. Each request owns its generator,
// so its draws never depend on which other requests share the batch or in what order they are
// sampled. Sample() takes exactly one draw per non-greedy call and none for greedy calls.
// Not thread-safe; one per request (copyable, so a request can be forked for n > 1).
class RequestRng {
 public:
  explicit RequestRng(absl::optional<uint64_t> seed);

  // The seed in use (the drawn one when none was given): log it to reproduce a request.
  uint64_t seed() const { return seed_; }
  // Uniform double in [0, 1) with 53 random bits.
  double Uniform();

 private:
  uint64_t seed_;
  std::mt19937_64 engine_;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = 0;
  // Raw log-softmax of the chosen token; computed only when params.logprobs >= 0, else 0.
  // Always finite (clamped to -FLT_MAX), so that it can be serialised as JSON.
  float logprob = 0.0f;
  // The min(params.logprobs, vocab) most likely tokens by raw logprob, descending, ties by lowest
  // id; tokens whose raw logit is -inf (masked by the model) are left out. May include the chosen
  // token.
  std::vector<TokenLogprob> top;
  // RawLogprobs only (0 from Sample): the token's 1-based rank in the whole row, the number of
  // tokens whose raw logit is at least its own (itself included), so tied tokens share the worse
  // rank (vLLM V1's rule for its logprobs `rank`).
  int32_t rank = 0;
};

// Draws the next token. Errors (nothing is drawn; the rng is not advanced):
//   InvalidArgument: empty logits, params failing Validate(), a context token id outside
//     [0, logits.size());
//   Internal: a NaN or +inf logit (a model fault, not the client's);
//   FailedPrecondition: every token is -inf after steps 1-3 (e.g. all of them suppressed).
absl::StatusOr<SampleResult> Sample(absl::Span<const float> logits, const SamplingParams& params,
                                    const SamplingContext& ctx, RequestRng& rng,
                                    SamplerScratch& scratch);

// The raw log-softmax of `token` in `logits`, its rank, and the top_n most likely tokens, exactly
// as Sample() reports logprobs (SampleResult::logprob and ::top; no sampling parameter applies).
// For prompt logprobs: the row at prompt position p scored against the prompt token p + 1.
// InvalidArgument for a token outside the row, Internal for a NaN or +inf logit.
absl::StatusOr<SampleResult> RawLogprobs(absl::Span<const float> logits, int32_t token,
                                         int32_t top_n);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_SAMPLER_H_
