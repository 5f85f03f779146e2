#include "server/beam_search_convert.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/sampling/sampling_params.h"
#include "server/status_details.h"

namespace blossom {
namespace {

absl::Status BeamRefusal(absl::string_view field, absl::string_view message) {
  return WithReason(
      WithFieldViolation(absl::InvalidArgumentError(message), field, message),
      error_reason::kInvalidBeamSearchParams);
}

// Proto3 enums are open: a number no version of the API defines is refused, not read as the
// default.
absl::StatusOr<EarlyStopping> FromProto(int mode) {
  switch (mode) {
    case v1::EARLY_STOPPING_HEURISTIC: return EarlyStopping::kHeuristic;
    case v1::EARLY_STOPPING_WHEN_FULL: return EarlyStopping::kWhenFull;
    case v1::EARLY_STOPPING_NEVER: return EarlyStopping::kNever;
    default:
      return BeamRefusal("early_stopping",
                         absl::StrCat("early_stopping must be HEURISTIC, WHEN_FULL or NEVER, got ",
                                      mode));
  }
}

}  // namespace

v1::GenerateRequest AsGenerateRequest(const v1::BeamSearchRequest& request) {
  v1::GenerateRequest g;
  if (request.has_token_ids()) {
    *g.mutable_token_ids() = request.token_ids();
  } else if (request.prompt_case() == v1::BeamSearchRequest::kText) {
    g.set_text(request.text());
  }
  g.mutable_sampling()->set_temperature(0.0f);
  *g.mutable_stopping() = request.stopping();
  g.set_priority(request.priority());
  g.set_model(request.model());
  g.set_request_id(request.request_id());
  g.set_return_prompt_tokens(request.return_prompt_tokens());
  g.set_truncate_prompt_tokens(request.truncate_prompt_tokens());
  return g;
}

absl::StatusOr<ConvertedBeamSearch> ToBeamSearch(const v1::BeamSearchRequest& request,
                                                 const Tokenizer& tokenizer,
                                                 const RequestLimits& limits,
                                                 absl::Span<const int32_t> end_token_ids,
                                                 int32_t vocab_size) {
  ConvertedBeamSearch out;
  // As for Generate, before tokenizing: a group the queue could never hold is refused for good
  // (AsGenerateRequest leaves group_size out, so the message counts beams, not generations).
  absl::Status group = CheckGroupSize(request.group_size(), limits, "beams");
  if (!group.ok()) return group;
  auto generation = ToEngineRequest(AsGenerateRequest(request), tokenizer, limits);
  if (!generation.ok()) return generation.status();
  out.as_generation = std::move(*generation);
  const StoppingParams& stopping = out.as_generation.stopping;
  // The engine validates a generation's stopping at Submit; a search submits one-token rounds,
  // so the client's stopping is validated here, with the same attribution.
  absl::Status stopping_valid = Validate(stopping, vocab_size);
  if (!stopping_valid.ok()) {
    return DescribeEngineRefusal(std::move(stopping_valid), out.as_generation, vocab_size,
                                 request.has_token_ids() ? "token_ids" : "text");
  }
  if (!stopping.stop_strings.empty()) {
    return BeamRefusal("stopping.stop",
                       "stopping.stop is not supported with beam search (a beam's score needs the "
                       "token that ends it): use stopping.stop_token_ids");
  }

  BeamSearchParams& p = out.search.params;
  if (request.beam_width() < 1 || request.beam_width() > kMaxBeamWidth) {
    return BeamRefusal("beam_width", absl::StrCat("beam_width must be in [1, ", kMaxBeamWidth,
                                                  "], got ", request.beam_width()));
  }
  p.beam_width = request.beam_width();
  // The group counts this search's own beams too: a smaller one is a client's mistake (it would
  // let searches through that together overflow the queue).
  if (request.group_size() != 0 && request.group_size() < p.beam_width) {
    return BeamRefusal("group_size",
                       absl::StrCat("group_size (the beams of the whole request) must be 0 or at "
                                    "least beam_width = ", p.beam_width, ", got ",
                                    request.group_size()));
  }
  p.num_return_sequences =
      request.has_num_return_sequences() ? request.num_return_sequences() : p.beam_width;
  if (p.num_return_sequences < 1 || p.num_return_sequences > p.beam_width) {
    return BeamRefusal("num_return_sequences",
                       absl::StrCat("num_return_sequences must be in [1, beam_width = ",
                                    p.beam_width, "], got ", p.num_return_sequences));
  }
  if (request.has_length_penalty()) {
    if (!(std::abs(request.length_penalty()) <= kMaxLengthPenalty)) {
      return BeamRefusal("length_penalty",
                         absl::StrCat("length_penalty must be in [-", kMaxLengthPenalty, ", ",
                                      kMaxLengthPenalty, "], got ", request.length_penalty()));
    }
    p.length_penalty = request.length_penalty();
  }
  absl::StatusOr<EarlyStopping> early_stopping = FromProto(request.early_stopping());
  if (!early_stopping.ok()) return early_stopping.status();
  p.early_stopping = *early_stopping;
  p.max_new_tokens = stopping.max_new_tokens;
  p.min_new_tokens = stopping.min_new_tokens;
  auto add_end_token = [&p](int32_t id) {
    if (std::find(p.end_tokens.begin(), p.end_tokens.end(), id) == p.end_tokens.end()) {
      p.end_tokens.push_back(id);
    }
  };
  if (!stopping.ignore_eos) {
    for (int32_t id : end_token_ids) add_end_token(id);
  }
  BeamSearchParams without_stop_ids = p;
  for (int32_t id : stopping.stop_token_ids) add_end_token(id);
  const int32_t candidates = CandidatesPerStep(p);
  if (candidates > kMaxLogprobs) {
    // The width with the model's end tokens fits: then the client's stop ids are what to cut.
    return BeamRefusal(
        CandidatesPerStep(without_stop_ids) <= kMaxLogprobs ? "stopping.stop_token_ids"
                                                            : "beam_width",
        absl::StrCat("beam_width times max(2, 1 + end tokens) must be at most ", kMaxLogprobs,
                     " (each beam weighs that many candidates a step); ", p.beam_width,
                     " beams with ", p.end_tokens.size(),
                     " end tokens (the model's and stopping.stop_token_ids) need ",
                     candidates));
  }
  // Anything left (a vocabulary smaller than the candidates) is refused in the engine's words.
  absl::Status valid = Validate(p, vocab_size);
  if (!valid.ok()) return BeamRefusal("beam_width", valid.message());
  out.search.prompt_tokens = out.as_generation.prompt_tokens;
  out.search.priority = out.as_generation.priority;
  return out;
}

void FillBeamSearchResponse(const BeamSearchOutcome& outcome, const v1::BeamSearchRequest& request,
                            const ConvertedBeamSearch& converted,
                            absl::Span<const int32_t> end_token_ids, const Tokenizer& tokenizer,
                            v1::BeamSearchResponse* out) {
  const StoppingParams& stopping = converted.as_generation.stopping;
  // As the stop checker decides for a generation: a model's end token is an EOS, before it is
  // a stop token the client also listed.
  auto is_eos = [&](int32_t token) {
    return !stopping.ignore_eos &&
           std::find(end_token_ids.begin(), end_token_ids.end(), token) != end_token_ids.end();
  };
  int32_t generated = 0;
  for (const BeamHypothesis& beam : outcome.beams) {
    v1::Beam* b = out->add_beams();
    for (size_t i = 0; i < beam.tokens.size(); ++i) {
      TokenEvent token;
      token.token = beam.tokens[i];
      token.logprob = beam.logprobs[i];
      FillToken(token, tokenizer, request.logprobs(), b->add_tokens());
    }
    size_t text_tokens = beam.tokens.size();
    if (beam.ended_by_end_token && !stopping.include_stop_string_in_output) --text_tokens;
    b->set_text(tokenizer.Decode(absl::MakeConstSpan(beam.tokens.data(), text_tokens),
                                 stopping.skip_special_tokens));
    b->set_score(beam.score);
    b->set_cumulative_logprob(beam.cumulative_logprob);
    if (!beam.ended_by_end_token) {
      b->set_finish_reason(v1::FINISH_REASON_LENGTH);
    } else if (is_eos(beam.tokens.back())) {
      b->set_finish_reason(v1::FINISH_REASON_EOS_TOKEN);
    } else {
      b->set_finish_reason(v1::FINISH_REASON_STOP_TOKEN);
    }
    generated += static_cast<int32_t>(beam.tokens.size());
  }
  v1::Usage* usage = out->mutable_usage();
  usage->set_prompt_tokens(outcome.prompt_tokens);
  usage->set_generated_tokens(generated);
  usage->set_cached_prompt_tokens(outcome.cached_prompt_tokens);
  out->set_steps(outcome.rounds);
  out->set_total_seconds(std::chrono::duration<double>(outcome.finished - outcome.arrival).count());
  if (request.return_prompt_tokens()) {
    for (int32_t id : converted.search.prompt_tokens) out->add_prompt_token_ids(id);
  }
}

}  // namespace blossom
