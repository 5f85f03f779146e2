#include "engine/generate/sequence_output.h"

#include <utility>

#include "kernels/status_macros.h"

namespace blossom {

SequenceOutput::SequenceOutput(const Tokenizer* tokenizer, std::vector<int32_t> prompt,
                               const SamplingParams& sampling, const StoppingParams& stopping,
                               absl::Span<const int32_t> end_token_ids)
    : prompt_(std::move(prompt)),
      sampling_(sampling),
      stop_(stopping, end_token_ids),
      end_token_(!end_token_ids.empty() && !stopping.ignore_eos ? end_token_ids.front() : -1),
      include_stop_text_(stopping.include_stop_string_in_output),
      decoder_(tokenizer, stopping.skip_special_tokens),
      rng_(sampling.seed) {}

absl::StatusOr<TokenEvent> SequenceOutput::Next(absl::Span<const float> logits,
                                                SamplerScratch& scratch) {
  BLOSSOM_ASSIGN_OR_RETURN(SampleRow row, PrepareSample(0));
  absl::StatusOr<SampleResult> sample = Sample(logits, sampling_, row.context, rng_, scratch);
  if (!sample.ok()) return sample.status();
  return Accept(std::move(*sample));
}

absl::StatusOr<SampleRow> SequenceOutput::PrepareSample(int64_t logit_row) {
  if (finished()) return absl::FailedPreconditionError("sequence already finished");
  suppressed_ = stop_.SuppressedTokens(static_cast<int32_t>(output_.size()));
  SampleRow row;
  row.logit_row = logit_row;
  row.params = &sampling_;
  row.context.prompt_tokens = prompt_;
  row.context.output_tokens = output_;
  row.context.suppressed_tokens = suppressed_;
  row.context.end_token = end_token_;
  row.rng = &rng_;
  return row;
}

absl::StatusOr<TokenEvent> SequenceOutput::Accept(SampleResult sample) {
  if (finished()) return absl::FailedPreconditionError("sequence already finished");
  output_.push_back(sample.token);
  TokenEvent event;
  event.token = sample.token;
  event.logprob = sample.logprob;
  event.top_logprobs = std::move(sample.top);
  // A token that ends the output (EOS, a stop token) completes the text before it: a partial
  // character held from earlier tokens is shown (as U+FFFD, as a batch decode shows it), not
  // merged into the token's own text, which may be left out.
  std::string before = stop_.EndsOn(sample.token) ? decoder_.Flush() : std::string();
  std::string delta = decoder_.Push(sample.token);
  StopChecker::Result result = stop_.Process(sample.token, delta, before);
  event.text_delta = std::move(result.text_to_emit);
  if (result.finished) {
    event.finished = true;
    event.finish_reason = result.reason;
    event.matched_stop = std::move(result.matched_stop);
    reason_ = result.reason;
    if (result.reason == FinishReason::kLength || result.reason == FinishReason::kEosToken ||
        (result.reason == FinishReason::kStopToken && include_stop_text_)) {
      // The stop checker already released its hold-back; a trailing partial UTF-8 character is
      // still in the decoder and becomes U+FFFD, exactly as a batch decode would show it (after
      // EOS: nothing, it was flushed before it; after a stop token shown as text: the stop
      // token's own partial bytes). Not after a stop string, nor after a stop token left out:
      // the text from there on is cut, partial bytes with it.
      event.text_delta += decoder_.Flush();
    }
  }
  text_ += event.text_delta;
  return event;
}

std::string SequenceOutput::Abort(FinishReason reason) {
  if (finished()) return "";
  reason_ = reason;
  // Held-back text, then a trailing partial UTF-8 character as U+FFFD: the text so far, as a
  // batch decode of the tokens so far shows it.
  std::string rest = stop_.Flush();
  rest += decoder_.Flush();
  text_ += rest;
  return rest;
}

}  // namespace blossom
