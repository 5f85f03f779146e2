// Turns one sequence's logits rows into tokens, text and a finish decision.
//
// This is the per-request half of generation, shared by the offline batch generator and the
// serving engine: sampling (with penalties, seed and min-token suppression), streaming
// detokenization that never splits a UTF-8 character, and stop rules (length, the model's end
// tokens, stop tokens, stop strings that are never shown in part).
//
// Not thread-safe: one per sequence, driven by the engine thread.
#ifndef BLOSSOM_ENGINE_GENERATE_SEQUENCE_OUTPUT_H_
#define BLOSSOM_ENGINE_GENERATE_SEQUENCE_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/sampling/batch_sampler.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampling_params.h"
#include "engine/sampling/stop_checker.h"
#include "engine/tokenizer/incremental_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace blossom {

// What one generated token produced.
struct TokenEvent {
  int32_t token = 0;
  std::string text_delta;  // text safe to show now (may be empty)
  float logprob = 0.0f;    // when logprobs were requested
  std::vector<TokenLogprob> top_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string matched_stop;
};

class SequenceOutput {
 public:
  // `tokenizer` must outlive this object; params must have passed Validate().
  // `end_token_ids`: the model's end tokens (StopChecker's), empty when it has none.
  SequenceOutput(const Tokenizer* tokenizer, std::vector<int32_t> prompt,
                 const SamplingParams& sampling, const StoppingParams& stopping,
                 absl::Span<const int32_t> end_token_ids);

  // Samples the next token from `logits` (the full vocabulary row) and applies the stop rules.
  absl::StatusOr<TokenEvent> Next(absl::Span<const float> logits, SamplerScratch& scratch);
  // Next() in two halves, for callers that sample a whole step at once (BatchSampler): the row
  // this sequence samples from logits row `logit_row` (its views point into this object and stay
  // valid until Accept or the next PrepareSample), then the stop rules on the token drawn.
  // PrepareSample fails with FailedPrecondition once the sequence has finished.
  absl::StatusOr<SampleRow> PrepareSample(int64_t logit_row);
  absl::StatusOr<TokenEvent> Accept(SampleResult sample);
  // Ends the sequence for a reason decided outside (cancellation, error): returns held-back
  // text that should still be delivered.
  std::string Abort(FinishReason reason);

  const std::vector<int32_t>& prompt() const { return prompt_; }
  const std::vector<int32_t>& output_tokens() const { return output_; }
  const std::string& text() const { return text_; }
  bool finished() const { return reason_ != FinishReason::kNone; }
  FinishReason finish_reason() const { return reason_; }
  uint64_t seed() const { return rng_.seed(); }

 private:
  std::vector<int32_t> prompt_;
  std::vector<int32_t> output_;
  std::vector<int32_t> suppressed_;  // this token's suppressed ids (PrepareSample's context)
  std::string text_;
  SamplingParams sampling_;
  StopChecker stop_;
  // The first end token unless ignore_eos, else -1: where a guided output is complete, the one
  // token it may end with (SamplingContext::end_token).
  const int32_t end_token_;
  const bool include_stop_text_;  // StoppingParams::include_stop_string_in_output
  IncrementalDecoder decoder_;
  RequestRng rng_;
  FinishReason reason_ = FinishReason::kNone;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GENERATE_SEQUENCE_OUTPUT_H_
