// Per-request sampling and stopping parameters, and their validation.
//
// The ranges follow vLLM and TGI so that clients written for either behave the same here; the
// exact limits are the named constants below so that the HTTP/gRPC layers can quote them.
// Validate() is meant to run once, at admission, and turn a bad request into INVALID_ARGUMENT
// before it reaches the engine; Sample() re-checks the cheap parts defensively.
#ifndef BLOSSOM_ENGINE_SAMPLING_SAMPLING_PARAMS_H_
#define BLOSSOM_ENGINE_SAMPLING_SAMPLING_PARAMS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/optional.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

// temperature in [0, kMaxTemperature]. vLLM caps at 2 for OpenAI compatibility; a larger cap costs
// nothing and some clients use temperatures above 2 to get near-uniform sampling.
inline constexpr float kMaxTemperature = 100.0f;
// top_k: -1 and 0 both mean "off" (vLLM uses -1, TGI/HF use 0 or absent); any value >= 1 is
// accepted and a value >= vocab_size is the same as off.
inline constexpr int32_t kTopKDisabled = -1;
// frequency_penalty and presence_penalty in [kMinAdditivePenalty, kMaxAdditivePenalty] (OpenAI).
inline constexpr float kMinAdditivePenalty = -2.0f;
inline constexpr float kMaxAdditivePenalty = 2.0f;
// logprobs in [-1, kMaxLogprobs] (vLLM's default max_logprobs and OpenAI's top_logprobs cap).
inline constexpr int32_t kMaxLogprobs = 20;
// Stop strings: at most this many, each 1..kMaxStopStringBytes bytes of valid UTF-8. TGI allows 4
// stop sequences; 16 leaves room for chat templates while bounding the per-token matching cost.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
// stop_token_ids: at most this many ids, each in [0, vocab_size).
inline constexpr size_t kMaxStopTokenIds = 64;
// logit_bias: at most this many tokens (OpenAI's limit), each bias in [-kMaxLogitBias,
// kMaxLogitBias] (OpenAI's range: -100 bans a token in practice, 100 all but forces it).
inline constexpr size_t kMaxLogitBiasTokens = 300;
inline constexpr float kMaxLogitBias = 100.0f;
// bad words: at most this many token sequences (vLLM's bad_words, tokenized two ways each), each
// of 1..kMaxBadWordTokens tokens: they are matched against the output at every step.
inline constexpr size_t kMaxBadWordSequences = 128;
inline constexpr size_t kMaxBadWords = kMaxBadWordSequences / 2;
// Guided choice: at most this many choices, each of 1..kMaxChoiceTokens tokens.
inline constexpr size_t kMaxGuidedChoices = 256;
inline constexpr size_t kMaxChoiceTokens = 256;
inline constexpr size_t kMaxBadWordTokens = 32;

struct LogitBias {
  int32_t token;
  float bias;
};

// How the next token is chosen from a row of logits. See sampler.h for the processing order.
// Plain value type; not validated on construction: call Validate().
struct SamplingParams {
  // 0 means greedy: the argmax of the processed logits, ties broken toward the lowest token id, and
  // top_k/top_p/typical_p/min_p and the rng are not used. Penalties still apply (as in vLLM).
  float temperature = 1.0f;
  int32_t top_k = 0;                // 0 or -1 = off.
  float top_p = 1.0f;               // (0, 1]; 1 = off.
  float typical_p = 1.0f;           // (0, 1]; 1 = off.
  float min_p = 0.0f;               // [0, 1]; 0 = off.
  float repetition_penalty = 1.0f;  // > 0; 1 = off (HF/CTRL multiplicative penalty).
  float frequency_penalty = 0.0f;   // [-2, 2]; 0 = off (OpenAI additive penalty).
  float presence_penalty = 0.0f;    // [-2, 2]; 0 = off (OpenAI additive penalty).
  // Seed of the per-request generator; absent = a random seed (reported by RequestRng::seed()).
  absl::optional<uint64_t> seed;
  // -1 = no logprobs; 0 = the chosen token's only; n = the chosen token's plus the top n tokens.
  int32_t logprobs = -1;
  // The same for every prompt token after the first (vLLM's prompt_logprobs; what evaluation
  // harnesses score): -1 = none. The request then computes its whole prompt (no prefix-cache
  // hits), since a cached position has no logits.
  int32_t prompt_logprobs = -1;
  // vLLM's allowed_token_ids: when not empty, every other token is masked (step 1), except the
  // end token of a guided output (choice or constraint), which must be able to end it.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad words as token sequences: the last token of one is masked whenever the output so
  // far ends with the tokens before it (a one-token sequence: always; step 1).
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  // OpenAI's logit_bias: added to these tokens' logits after the masks, before the penalties
  // (vLLM's order). Distinct tokens.
  std::vector<LogitBias> logit_bias;
  // vLLM's guided_choice as token sequences: the output is one of them. While the output so far
  // is a prefix of some choices, only their next tokens are allowed; once it equals a choice,
  // the end token (SamplingContext::end_token) is too (step 1).
  std::vector<std::vector<int32_t>> choice_token_ids;
  // Structured output (vLLM's guided_json, OpenAI's response_format): only the tokens the
  // constraint allows after the output so far, and the end token where it says the output is
  // complete (step 1). Null = none. Shared: it is immutable and may be cached across requests.
  std::shared_ptr<const TokenConstraint> constraint;
};

// When generation ends. Plain value type; not validated on construction: call Validate().
struct StoppingParams {
  int32_t max_new_tokens = 16;  // >= 1; the engine separately caps prompt + max_new_tokens.
  // Until this many tokens were generated, EOS and stop tokens are suppressed; stop strings end
  // the request only after them (vLLM V1; see stop_checker.h).
  int32_t min_new_tokens = 0;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  // Emit the matched stop string (and a stop token's text) instead of cutting right before it.
  bool include_stop_string_in_output = false;
  // Leave special tokens (</s>, <pad>, ...) out of the output text, as TGI and vLLM do by
  // default; false keeps them (vLLM's skip_special_tokens=false).
  bool skip_special_tokens = true;
  // TGI's rule: a stop string ends the output only when the text, after a whole token, ends with
  // it; false: vLLM's rule, a match anywhere in the token's text (stop_checker.h, rule 3).
  bool stop_at_text_end = false;
};

// True when params select greedy decoding.
inline bool IsGreedy(const SamplingParams& params) { return params.temperature == 0.0f; }

// OK, or InvalidArgument naming the field and its allowed range, e.g.
// "top_p must be in (0, 1], got 1.5". NaN and infinities are rejected everywhere. vocab_size must
// be >= 1; top_k and logprobs larger than the vocabulary are allowed and clamped at sampling time.
absl::Status Validate(const SamplingParams& params, int32_t vocab_size);

// OK, or InvalidArgument naming the field (and index for list entries) and its allowed range.
// Stop token ids must lie in [0, vocab_size).
absl::Status Validate(const StoppingParams& params, int32_t vocab_size);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_SAMPLING_PARAMS_H_
