#include "clients/gateway/beam_search.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "clients/gateway/json_fields.h"
#include "kernels/status_macros.h"

namespace blossom::gateway::openai {
namespace {

using blossom::v1::BeamSearchRequest;
using blossom::v1::GenerateRequest;

// The server's limit on BeamSearchRequest.beam_width (engine/generate/beam_scorer.h).
constexpr int kMaxBeamWidth = 10;

absl::Status NotWithBeamSearch(absl::string_view field, absl::string_view why = "") {
  return FieldError(field, absl::StrCat("is not supported with use_beam_search", why));
}

// A sampling field that beam search would silently ignore: refused unless it is the no-op.
absl::Status CheckSamplingIsNoOp(const blossom::v1::SamplingParameters& s) {
  constexpr char kRanks[] = " (beam search ranks the model's own log-probabilities)";
  if (s.has_temperature() && s.temperature() != 0.0f && s.temperature() != 1.0f) {
    return FieldError("temperature", absl::StrCat("must be 0 or 1 with use_beam_search", kRanks));
  }
  if (s.has_top_p() && s.top_p() != 1.0f) return NotWithBeamSearch("top_p", kRanks);
  if (s.has_top_k() && s.top_k() > 0) return NotWithBeamSearch("top_k", kRanks);
  if (s.has_min_p() && s.min_p() != 0.0f) return NotWithBeamSearch("min_p", kRanks);
  if (s.has_typical_p() && s.typical_p() != 1.0f) return NotWithBeamSearch("typical_p", kRanks);
  if (s.has_repetition_penalty() && s.repetition_penalty() != 1.0f) {
    return NotWithBeamSearch("repetition_penalty", kRanks);
  }
  if (s.has_frequency_penalty() && s.frequency_penalty() != 0.0f) {
    return NotWithBeamSearch("frequency_penalty", kRanks);
  }
  if (s.has_presence_penalty() && s.presence_penalty() != 0.0f) {
    return NotWithBeamSearch("presence_penalty", kRanks);
  }
  if (!s.logit_bias().empty()) return NotWithBeamSearch("logit_bias", kRanks);
  if (s.allowed_token_ids_size() > 0) return NotWithBeamSearch("allowed_token_ids");
  if (s.bad_words_size() > 0) return NotWithBeamSearch("bad_words");
  if (s.guided_choice_size() > 0) return NotWithBeamSearch("guided_choice");
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseBeamSearch(const nlohmann::json& body, CompletionRequest* request) {
  absl::optional<bool> use;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "use_beam_search", &use));
  absl::optional<double> length_penalty;
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "length_penalty", &length_penalty));
  auto early = body.find("early_stopping");
  const bool has_early = early != body.end() && !early->is_null();
  if (!use.value_or(false)) {
    // vLLM ignores them without beam search; a client that sends them expects beam search.
    if (length_penalty) return FieldError("length_penalty", "applies only with use_beam_search: true");
    if (has_early) return FieldError("early_stopping", "applies only with use_beam_search: true");
    return absl::OkStatus();
  }
  if (request->stream) {
    return NotWithBeamSearch("stream", " (the beams are known only at the end)");
  }
  if (request->best_of > request->n) {
    return NotWithBeamSearch("best_of", " above n (n is the beam width)");
  }
  if (request->n > kMaxBeamWidth) {
    return FieldError("n", absl::StrCat("must be at most ", kMaxBeamWidth,
                                        " with use_beam_search (n is the beam width), got ",
                                        request->n));
  }
  const GenerateRequest& g = request->request;
  BLOSSOM_RETURN_IF_ERROR(CheckSamplingIsNoOp(g.sampling()));
  if (!request->constraint_param.empty()) return NotWithBeamSearch(request->constraint_param);
  if (g.stopping().stop_size() > 0) {
    return NotWithBeamSearch("stop", " (a beam's score needs the token that ends it: use "
                                     "stop_token_ids)");
  }
  if (request->echo) return NotWithBeamSearch("echo");
  if (request->prompt_logprobs >= 0) return NotWithBeamSearch("prompt_logprobs");
  if (request->top_logprobs > 0) {
    return NotWithBeamSearch(request->chat ? "top_logprobs" : "logprobs",
                             " above 0 (each beam token's own logprob is given)");
  }
  BeamSearchRequest& beam = request->beam;
  beam.set_beam_width(request->n);
  if (length_penalty) beam.set_length_penalty(*length_penalty);
  if (has_early) {
    if (early->is_boolean()) {
      beam.set_early_stopping(early->get<bool>() ? blossom::v1::EARLY_STOPPING_WHEN_FULL
                                                 : blossom::v1::EARLY_STOPPING_HEURISTIC);
    } else if (early->is_string() && early->get_ref<const std::string&>() == "never") {
      beam.set_early_stopping(blossom::v1::EARLY_STOPPING_NEVER);
    } else {
      return FieldError("early_stopping", "must be true, false or \"never\"");
    }
  }
  beam.set_logprobs(request->logprobs);
  request->beam_search = true;
  return absl::OkStatus();
}

std::vector<BeamSearchRequest> BeamSearchCalls(const CompletionRequest& request) {
  std::vector<const GenerateRequest*> prompts;
  if (request.batch.empty()) {
    prompts.push_back(&request.request);
  } else {
    for (size_t k = 0; k < request.batch.size(); k += static_cast<size_t>(request.n)) {
      prompts.push_back(&request.batch[k]);
    }
  }
  // The searches run at once, each needing room for its beams in the server's waiting queue:
  // with the whole request's beams the server refuses for good (GROUP_TOO_LARGE, a 400 on n) a
  // request its queue could never hold, where each search alone would fit and some be refused
  // with a 429 on every retry. FillBatch bounds prompts x n (kMaxChoices), so this fits.
  const int32_t group_size = static_cast<int32_t>(prompts.size()) * request.beam.beam_width();
  std::vector<BeamSearchRequest> calls;
  for (const GenerateRequest* prompt : prompts) {
    BeamSearchRequest call = request.beam;
    call.set_group_size(group_size);
    if (prompt->has_token_ids()) {
      *call.mutable_token_ids() = prompt->token_ids();
    } else {
      call.set_text(prompt->text());
    }
    *call.mutable_stopping() = prompt->stopping();
    call.set_model(prompt->model());
    call.set_request_id(prompt->request_id());
    call.set_priority(prompt->priority());
    call.set_truncate_prompt_tokens(prompt->truncate_prompt_tokens());
    calls.push_back(std::move(call));
  }
  return calls;
}

std::vector<blossom::v1::GenerateResponse> BeamsAsChoices(
    const blossom::v1::BeamSearchResponse& response) {
  std::vector<blossom::v1::GenerateResponse> choices;
  for (const blossom::v1::Beam& beam : response.beams()) {
    blossom::v1::GenerateResponse choice;
    choice.set_text(beam.text());
    *choice.mutable_tokens() = beam.tokens();
    blossom::v1::FinalInfo* final_info = choice.mutable_final();
    final_info->set_finish_reason(beam.finish_reason());
    final_info->mutable_usage()->set_prompt_tokens(response.usage().prompt_tokens());
    final_info->mutable_usage()->set_cached_prompt_tokens(response.usage().cached_prompt_tokens());
    final_info->mutable_usage()->set_generated_tokens(beam.tokens_size());
    final_info->set_request_id(response.request_id());
    final_info->set_system_fingerprint(response.system_fingerprint());
    choices.push_back(std::move(choice));
  }
  return choices;
}

}  // namespace blossom::gateway::openai
