#include "server/request_convert.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/text/sanitize.h"
#include "engine/text/utf8.h"

namespace blossom {
namespace {

double Seconds(Clock::time_point from, Clock::time_point to) {
  if (from == Clock::time_point{} || to == Clock::time_point{}) return 0.0;
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& request,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits) {
  // A name that can never match is refused without echoing it: error messages travel as gRPC
  // trailers (an 8 KB name overflowed them into RESOURCE_EXHAUSTED) and into logs.
  if (request.model().size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: longer than ", kMaxModelNameBytes, " bytes"));
  }
  if (!request.model().empty() && !limits.served_model_name.empty() &&
      request.model() != limits.served_model_name) {
    return absl::NotFoundError(absl::StrCat(
        "model '", SanitizeForMessage(request.model(), kMaxModelNameBytes),
        "' is not served here; this server serves '", limits.served_model_name, "'"));
  }
  EngineRequest out;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      // proto3 parsers reject invalid UTF-8 in string fields, but a C++ caller in-process can
      // still hand us any bytes.
      if (FindInvalidUtf8(request.text()) != absl::string_view::npos) {
        return absl::InvalidArgumentError("text is not valid UTF-8");
      }
      if (request.text().empty()) return absl::InvalidArgumentError("text must not be empty");
      auto ids = tokenizer.Encode(request.text());
      if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("text: ", ids.status().message()));
      out.prompt_tokens = std::move(*ids);
      if (out.prompt_tokens.empty()) {
        return absl::InvalidArgumentError("text encodes to no tokens");
      }
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      out.prompt_tokens.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      if (out.prompt_tokens.empty()) {
        return absl::InvalidArgumentError("token_ids must not be empty");
      }
      break;
    default:
      return absl::InvalidArgumentError("prompt is missing: set text or token_ids");
  }
  if (static_cast<int64_t>(out.prompt_tokens.size()) > limits.max_input_tokens) {
    // OUT_OF_RANGE distinguishes "too long" from a malformed request; the gateway maps it to 413.
    return absl::OutOfRangeError(absl::StrCat("prompt is too long: ", out.prompt_tokens.size(),
                                              " tokens, max_input_tokens is ",
                                              limits.max_input_tokens));
  }

  const v1::SamplingParameters& s = request.sampling();
  SamplingParams& sp = out.sampling;
  if (s.has_temperature()) sp.temperature = s.temperature();
  if (s.has_top_k()) sp.top_k = s.top_k();
  if (s.has_top_p()) sp.top_p = s.top_p();
  if (s.has_typical_p()) sp.typical_p = s.typical_p();
  if (s.has_min_p()) sp.min_p = s.min_p();
  if (s.has_repetition_penalty()) sp.repetition_penalty = s.repetition_penalty();
  if (s.has_frequency_penalty()) sp.frequency_penalty = s.frequency_penalty();
  if (s.has_presence_penalty()) sp.presence_penalty = s.presence_penalty();
  if (s.has_seed()) sp.seed = s.seed();
  if (s.has_logprobs()) {
    if (s.logprobs() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.logprobs must be in [0, ", kMaxLogprobs, "], got ", s.logprobs()));
    }
    sp.logprobs = s.logprobs();
  }
  if (s.has_prompt_logprobs()) {
    if (s.prompt_logprobs() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.prompt_logprobs must be in [0, ",
                                                     kMaxLogprobs, "], got ",
                                                     s.prompt_logprobs()));
    }
    sp.prompt_logprobs = s.prompt_logprobs();
  }

  const v1::StoppingParameters& t = request.stopping();
  StoppingParams& st = out.stopping;
  if (t.has_max_new_tokens()) st.max_new_tokens = t.max_new_tokens();
  if (t.has_min_new_tokens()) st.min_new_tokens = t.min_new_tokens();
  st.ignore_eos = t.ignore_eos();
  st.stop_token_ids.assign(t.stop_token_ids().begin(), t.stop_token_ids().end());
  st.stop_strings.assign(t.stop().begin(), t.stop().end());
  st.include_stop_string_in_output = t.include_stop_in_output();
  out.priority = request.priority();
  return out;
}

v1::FinishReason ToProtoFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEosToken: return v1::FINISH_REASON_EOS_TOKEN;
    case FinishReason::kStopToken: return v1::FINISH_REASON_STOP_TOKEN;
    case FinishReason::kStopString: return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError: return v1::FINISH_REASON_ERROR;
    case FinishReason::kNone: break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void FillToken(const TokenEvent& token, const Tokenizer& tokenizer, bool with_logprobs,
               v1::Token* out) {
  out->set_id(token.token);
  out->set_text(Utf8Lossy(tokenizer.DecodedBytes(token.token, false)));
  if (with_logprobs) out->set_logprob(token.logprob);
  for (const TokenLogprob& top : token.top_logprobs) {
    v1::TopLogprob* t = out->add_top_logprobs();
    t->set_token_id(top.token);
    t->set_token(Utf8Lossy(tokenizer.DecodedBytes(top.token, false)));
    t->set_logprob(top.logprob);
  }
}

void FillPromptLogprobs(int32_t first_prompt_token, const std::vector<PromptLogprob>& scored,
                        const Tokenizer& tokenizer,
                        google::protobuf::RepeatedPtrField<v1::Token>* out) {
  v1::Token* first = out->Add();
  first->set_id(first_prompt_token);
  first->set_text(Utf8Lossy(tokenizer.DecodedBytes(first_prompt_token, false)));
  for (const PromptLogprob& p : scored) {
    TokenEvent token;
    token.token = p.token;
    token.logprob = p.logprob;
    token.top_logprobs = p.top;
    FillToken(token, tokenizer, /*with_logprobs=*/true, out->Add());
  }
}

void FillFinalInfo(const EngineEvent& final_event, const std::string& request_id,
                   v1::FinalInfo* out) {
  out->set_finish_reason(ToProtoFinishReason(final_event.finish_reason));
  out->set_matched_stop(final_event.token.matched_stop);
  out->set_request_id(request_id);
  out->set_seed(final_event.seed);
  v1::Usage* usage = out->mutable_usage();
  usage->set_prompt_tokens(final_event.usage.prompt_tokens);
  usage->set_generated_tokens(final_event.usage.generated_tokens);
  usage->set_cached_prompt_tokens(final_event.usage.cached_prompt_tokens);
  const RequestTimings& t = final_event.timings;
  v1::Timings* timings = out->mutable_timings();
  timings->set_queue_seconds(Seconds(t.arrival, t.first_scheduled));
  timings->set_time_to_first_token_seconds(Seconds(t.arrival, t.first_token));
  const double total = Seconds(t.arrival, t.finished);
  timings->set_total_seconds(total);
  const int32_t n = final_event.usage.generated_tokens;
  if (n >= 2 && t.first_token != Clock::time_point{}) {
    timings->set_ms_per_output_token(1e3 * Seconds(t.first_token, t.finished) / (n - 1));
  }
  timings->set_preemptions(t.num_preemptions);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  absl::string_view message = status.message();
  if (message.size() > kMaxStatusMessageBytes) {
    // Whatever a message quotes, it stays far below gRPC's metadata limit; cut at a UTF-8
    // character boundary.
    size_t cut = kMaxStatusMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        absl::StrCat(message.substr(0, cut), "..."));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(message));
}

}  // namespace blossom
