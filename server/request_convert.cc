#include "server/request_convert.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/text/sanitize.h"
#include "engine/text/utf8.h"
#include "kernels/status_macros.h"
#include "server/status_details.h"

namespace blossom {
namespace {

double Seconds(Clock::time_point from, Clock::time_point to) {
  if (from == Clock::time_point{} || to == Clock::time_point{}) return 0.0;
  return std::chrono::duration<double>(to - from).count();
}

// An INVALID_ARGUMENT (or `code`) refusal naming `field`, with `reason`.
absl::Status Refusal(absl::string_view reason, absl::string_view field, absl::string_view message,
                     absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  return WithReason(WithFieldViolation(absl::Status(code, message), field, message), reason);
}

// The field of request.sampling whose value the engine rejects, or "".
std::string RejectedSamplingField(const SamplingParams& requested, int32_t vocab_size) {
  using Setter = void (*)(const SamplingParams&, SamplingParams&);
  // Sampling fields are validated independently of each other: one probe per field.
  static const std::pair<const char*, Setter> kProbes[] = {
      {"temperature", [](const SamplingParams& r, SamplingParams& p) { p.temperature = r.temperature; }},
      {"top_k", [](const SamplingParams& r, SamplingParams& p) { p.top_k = r.top_k; }},
      {"top_p", [](const SamplingParams& r, SamplingParams& p) { p.top_p = r.top_p; }},
      {"typical_p", [](const SamplingParams& r, SamplingParams& p) { p.typical_p = r.typical_p; }},
      {"min_p", [](const SamplingParams& r, SamplingParams& p) { p.min_p = r.min_p; }},
      {"repetition_penalty",
       [](const SamplingParams& r, SamplingParams& p) { p.repetition_penalty = r.repetition_penalty; }},
      {"frequency_penalty",
       [](const SamplingParams& r, SamplingParams& p) { p.frequency_penalty = r.frequency_penalty; }},
      {"presence_penalty",
       [](const SamplingParams& r, SamplingParams& p) { p.presence_penalty = r.presence_penalty; }},
      {"logprobs", [](const SamplingParams& r, SamplingParams& p) { p.logprobs = r.logprobs; }},
      {"prompt_logprobs",
       [](const SamplingParams& r, SamplingParams& p) { p.prompt_logprobs = r.prompt_logprobs; }},
      {"allowed_token_ids",
       [](const SamplingParams& r, SamplingParams& p) { p.allowed_token_ids = r.allowed_token_ids; }},
      {"bad_words", [](const SamplingParams& r,
                       SamplingParams& p) { p.bad_words_token_ids = r.bad_words_token_ids; }},
      {"logit_bias", [](const SamplingParams& r, SamplingParams& p) { p.logit_bias = r.logit_bias; }},
      {"guided_choice",
       [](const SamplingParams& r, SamplingParams& p) { p.choice_token_ids = r.choice_token_ids; }},
  };
  for (const auto& [field, set] : kProbes) {
    SamplingParams probe;
    set(requested, probe);
    if (!Validate(probe, vocab_size).ok()) return field;
  }
  return "";
}

// The same for request.stopping; fields are added cumulatively (min_new_tokens is checked
// against max_new_tokens). Names are the blossom.v1 ones ("stop", not "stop_strings").
std::string RejectedStoppingField(const StoppingParams& requested, int32_t vocab_size) {
  StoppingParams probe;
  probe.max_new_tokens = requested.max_new_tokens;
  if (!Validate(probe, vocab_size).ok()) return "max_new_tokens";
  probe.min_new_tokens = requested.min_new_tokens;
  if (!Validate(probe, vocab_size).ok()) return "min_new_tokens";
  probe.stop_token_ids = requested.stop_token_ids;
  if (!Validate(probe, vocab_size).ok()) return "stop_token_ids";
  probe.stop_strings = requested.stop_strings;
  if (!Validate(probe, vocab_size).ok()) return "stop";
  return "";
}

// `text` without the leading characters Python's str.lstrip() removes (Unicode whitespace: the
// ASCII ones, U+001C-U+001F, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
// U+205F, U+3000), as vLLM strips a bad word. Text that is not UTF-8 is left as it is (the
// tokenizer refuses it).
absl::string_view StripLeadingWhitespace(absl::string_view text) {
  if (FindInvalidUtf8(text) != absl::string_view::npos) return text;
  while (!text.empty()) {
    size_t length = 0;
    const uint32_t cp = DecodeUtf8At(text, 0, &length);
    const bool space = (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
                       cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
                       cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
                       cp == 0x3000;
    if (!space) break;
    text.remove_prefix(length);
  }
  return text;
}

// Entry i of the sampling list `field` as 1..max_tokens tokens, or the refusal naming the field.
absl::StatusOr<std::vector<int32_t>> EncodeListEntry(const Tokenizer& tokenizer,
                                                     absl::string_view text,
                                                     absl::string_view field, int i,
                                                     size_t max_tokens) {
  auto ids = text.empty() ? absl::StatusOr<std::vector<int32_t>>(std::vector<int32_t>())
                          : tokenizer.Encode(text);
  if (!ids.ok() || ids->empty() || ids->size() > max_tokens) {
    return Refusal(error_reason::kInvalidSamplingParams, absl::StrCat("sampling.", field),
                   absl::StrCat("sampling.", field, "[", i, "] must be text of 1 to ", max_tokens,
                                " tokens",
                                ids.ok() ? "" : absl::StrCat(": ", ids.status().message())));
  }
  return ids;
}

// vLLM's tokenization of bad words: each without its leading whitespace, and with one leading
// space where that changes only the first token (BLOOM's byte-level BPE spells " word" as a
// token of its own), so the word is banned at the start and in the middle of text.
absl::Status AddBadWords(const google::protobuf::RepeatedPtrField<std::string>& words,
                         const Tokenizer& tokenizer, SamplingParams& sp) {
  if (static_cast<size_t>(words.size()) > kMaxBadWords) {
    return Refusal(error_reason::kInvalidSamplingParams, "sampling.bad_words",
                   absl::StrCat("sampling.bad_words: at most ", kMaxBadWords, " words, got ",
                                words.size()));
  }
  for (int i = 0; i < words.size(); ++i) {
    const absl::string_view word = StripLeadingWhitespace(words[i]);
    BLOSSOM_ASSIGN_OR_RETURN(std::vector<int32_t> plain,
                             EncodeListEntry(tokenizer, word, "bad_words", i, kMaxBadWordTokens));
    auto spaced = tokenizer.Encode(absl::StrCat(" ", word));
    const bool spaced_differs =
        spaced.ok() && spaced->size() == plain.size() && spaced->front() != plain.front();
    sp.bad_words_token_ids.push_back(std::move(plain));
    if (spaced_differs) sp.bad_words_token_ids.push_back(*std::move(spaced));
  }
  return absl::OkStatus();
}

// vLLM's guided_choice: each choice as the tokenizer splits it (the model's own spelling of it).
// The output ends on EOS after a whole choice, so EOS must be able to end it.
absl::Status AddChoices(const v1::GenerateRequest& request, const Tokenizer& tokenizer,
                        SamplingParams& sp) {
  const auto& choices = request.sampling().guided_choice();
  if (choices.empty()) return absl::OkStatus();
  if (static_cast<size_t>(choices.size()) > kMaxGuidedChoices) {
    return Refusal(error_reason::kInvalidSamplingParams, "sampling.guided_choice",
                   absl::StrCat("sampling.guided_choice: at most ", kMaxGuidedChoices,
                                " choices, got ", choices.size()));
  }
  if (request.stopping().ignore_eos() || request.stopping().min_new_tokens() > 0) {
    return Refusal(error_reason::kInvalidSamplingParams, "sampling.guided_choice",
                   "sampling.guided_choice ends the output with EOS after a whole choice: it "
                   "cannot be combined with ignore_eos or min_new_tokens");
  }
  for (int i = 0; i < choices.size(); ++i) {
    BLOSSOM_ASSIGN_OR_RETURN(
        std::vector<int32_t> ids,
        EncodeListEntry(tokenizer, choices[i], "guided_choice", i, kMaxChoiceTokens));
    sp.choice_token_ids.push_back(std::move(ids));
  }
  return absl::OkStatus();
}

// Structured output: a JSON schema, a regex or a grammar compiled (or found compiled) into the
// constraint the sampler applies. Like a choice, the output ends with EOS.
// Marks ToEngineRequest's kRecentOnly stop at a constraint not compiled yet (not a "type.
// googleapis.com/" payload, so it never reaches a client).
constexpr char kNotCompiledPayload[] = "blossom.dev/guided-not-compiled";

absl::Status AddGrammar(const v1::GenerateRequest& request, ConstraintCache* guided_constraints,
                        ConstraintCache::Mode mode, SamplingParams& sp) {
  const v1::SamplingParameters& s = request.sampling();
  if (s.json_compact() && !s.has_json_schema()) {
    return Refusal(error_reason::kInvalidSamplingParams, "sampling.json_compact",
                   "sampling.json_compact is set without sampling.json_schema");
  }
  const int given = s.has_json_schema() + s.has_regex() + s.has_grammar();
  if (given == 0) return absl::OkStatus();
  const char* field = s.has_json_schema() ? "sampling.json_schema"
                      : s.has_regex()     ? "sampling.regex"
                                          : "sampling.grammar";
  auto refuse = [&](absl::string_view message) {
    return Refusal(error_reason::kInvalidSamplingParams, field, message);
  };
  if (guided_constraints == nullptr) {
    return refuse(absl::StrCat(field, ": structured output is not available on this server"));
  }
  if (given > 1) {
    return refuse("give one of sampling.json_schema, sampling.regex and sampling.grammar");
  }
  if (!sp.choice_token_ids.empty()) {
    return refuse(absl::StrCat("give ", field, " or sampling.guided_choice, not both"));
  }
  if (request.stopping().ignore_eos() || request.stopping().min_new_tokens() > 0) {
    return refuse(absl::StrCat(field, " ends the output with EOS once it is complete: it cannot "
                                      "be combined with ignore_eos or min_new_tokens"));
  }
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> constraint;
  if (s.has_json_schema()) {
    JsonGrammarOptions options;
    options.allow_whitespace = !s.json_compact();
    constraint = guided_constraints->JsonSchema(s.json_schema(), options, mode);
  } else if (s.has_regex()) {
    constraint = guided_constraints->Regex(s.regex(), mode);
  } else {
    constraint = guided_constraints->Grammar(s.grammar(), mode);
  }
  if (mode == ConstraintCache::Mode::kRecentOnly && absl::IsNotFound(constraint.status())) {
    absl::Status not_compiled = constraint.status();
    not_compiled.SetPayload(kNotCompiledPayload, absl::Cord());
    return not_compiled;
  }
  if (constraint.status().code() == absl::StatusCode::kResourceExhausted) {
    // Nothing is wrong with the request: the compile slots are busy, and a retry may find one.
    return GuidedCompileBusyError(absl::StrCat(field, ": ", constraint.status().message()));
  }
  if (!constraint.ok()) return refuse(absl::StrCat(field, ": ", constraint.status().message()));
  sp.constraint = *std::move(constraint);
  return absl::OkStatus();
}

}  // namespace

absl::Status GuidedCompileBusyError(absl::string_view message) {
  return WithRetryDelay(
      WithReason(absl::ResourceExhaustedError(message), error_reason::kGuidedCompileBusy),
      kGuidedCompileRetryDelay);
}

absl::Status CheckGroupSize(int32_t group_size, const RequestLimits& limits,
                            absl::string_view what) {
  if (group_size < 0) {
    return Refusal(error_reason::kInvalidRequest, "group_size",
                   absl::StrCat("group_size must be >= 0, got ", group_size));
  }
  if (group_size > limits.max_waiting_requests) {
    return Refusal(error_reason::kGroupTooLarge, "group_size",
                   absl::StrCat("the request asks for ", group_size, " ", what,
                                " at once, more than this server's waiting queue holds "
                                "(max_waiting_requests ",
                                limits.max_waiting_requests,
                                "): it could never be admitted; ask for fewer"),
                   absl::StatusCode::kOutOfRange);
  }
  return absl::OkStatus();
}

bool GuidedConstraintNotCompiled(const absl::Status& status) {
  return status.GetPayload(kNotCompiledPayload).has_value();
}

absl::Status CheckModelName(absl::string_view model, const RequestLimits& limits) {
  // A name that can never match is refused without echoing it: error messages travel as gRPC
  // trailers (an 8 KB name overflowed them into RESOURCE_EXHAUSTED) and into logs.
  if (model.size() > kMaxModelNameBytes) {
    return Refusal(error_reason::kInvalidModelName, "model",
                   absl::StrCat("model: longer than ", kMaxModelNameBytes, " bytes"));
  }
  if (!model.empty() && !limits.served_model_name.empty() &&
      model != limits.served_model_name) {
    return Refusal(error_reason::kUnknownModel, "model",
                   absl::StrCat("model '", SanitizeForMessage(model, kMaxModelNameBytes),
                                "' is not served here; this server serves '",
                                limits.served_model_name, "'"),
                   absl::StatusCode::kNotFound);
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& request,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits,
                                              ConstraintCache* guided_constraints,
                                              ConstraintCache::Mode guided_mode) {
  BLOSSOM_RETURN_IF_ERROR(CheckModelName(request.model(), limits));
  // Before tokenizing: refused whatever the prompt.
  BLOSSOM_RETURN_IF_ERROR(CheckGroupSize(request.group_size(), limits, "generations"));
  if (request.priority() != 0 && !limits.priority_scheduling) {
    return Refusal(error_reason::kPriorityNotEnabled, "priority",
                   absl::StrCat("priority ", request.priority(),
                                " given but this server schedules first come, first served "
                                "(start it with --scheduling_policy=priority to honour it)"));
  }
  EngineRequest out;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      // proto3 parsers reject invalid UTF-8 in string fields, but a C++ caller in-process can
      // still hand us any bytes.
      if (FindInvalidUtf8(request.text()) != absl::string_view::npos) {
        return Refusal(error_reason::kInvalidPrompt, "text", "text is not valid UTF-8");
      }
      if (request.text().empty()) {
        return Refusal(error_reason::kInvalidPrompt, "text", "text must not be empty");
      }
      auto ids = tokenizer.Encode(request.text());
      if (!ids.ok()) {
        return Refusal(error_reason::kInvalidPrompt, "text",
                       absl::StrCat("text: ", ids.status().message()));
      }
      out.prompt_tokens = std::move(*ids);
      if (out.prompt_tokens.empty()) {
        return Refusal(error_reason::kInvalidPrompt, "text", "text encodes to no tokens");
      }
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      out.prompt_tokens.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      if (out.prompt_tokens.empty()) {
        return Refusal(error_reason::kInvalidPrompt, "token_ids", "token_ids must not be empty");
      }
      break;
    default:
      return Refusal(error_reason::kInvalidPrompt, "prompt",
                     "prompt is missing: set text or token_ids");
  }
  if (request.truncate_prompt_tokens() < 0) {
    return Refusal(error_reason::kInvalidPrompt, "truncate_prompt_tokens",
                   absl::StrCat("truncate_prompt_tokens must be >= 0 (0 keeps the whole prompt), "
                                "got ",
                                request.truncate_prompt_tokens()));
  }
  if (request.truncate_prompt_tokens() > 0 &&
      out.prompt_tokens.size() > static_cast<size_t>(request.truncate_prompt_tokens())) {
    // The end of the prompt is kept: it is what the continuation follows.
    out.prompt_tokens.erase(out.prompt_tokens.begin(),
                            out.prompt_tokens.end() - request.truncate_prompt_tokens());
  }
  if (static_cast<int64_t>(out.prompt_tokens.size()) > limits.max_input_tokens) {
    // OUT_OF_RANGE: a valid request beyond this server's limit; the reason says which limit.
    return Refusal(error_reason::kPromptTooLong,
                   request.prompt_case() == v1::GenerateRequest::kText ? "text" : "token_ids",
                   absl::StrCat("prompt is too long: ", out.prompt_tokens.size(),
                                " tokens, max_input_tokens is ", limits.max_input_tokens),
                   absl::StatusCode::kOutOfRange);
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
    // The whole range here: the engine's own message speaks of -1, its "none", which this API
    // spells by leaving the field out.
    if (s.logprobs() < 0 || s.logprobs() > kMaxLogprobs) {
      return Refusal(error_reason::kInvalidSamplingParams, "sampling.logprobs",
                     absl::StrCat("sampling.logprobs must be in [0, ", kMaxLogprobs, "], got ",
                                  s.logprobs()));
    }
    sp.logprobs = s.logprobs();
  }
  if (s.has_prompt_logprobs()) {
    if (s.prompt_logprobs() < 0 || s.prompt_logprobs() > kMaxLogprobs) {
      return Refusal(error_reason::kInvalidSamplingParams, "sampling.prompt_logprobs",
                     absl::StrCat("sampling.prompt_logprobs must be in [0, ", kMaxLogprobs,
                                  "], got ", s.prompt_logprobs()));
    }
    sp.prompt_logprobs = s.prompt_logprobs();
  }
  sp.allowed_token_ids.assign(s.allowed_token_ids().begin(), s.allowed_token_ids().end());
  // The map's order is unspecified: sorted by token, so the same request samples the same way.
  for (const auto& [token, bias] : s.logit_bias()) sp.logit_bias.push_back({token, bias});
  std::sort(sp.logit_bias.begin(), sp.logit_bias.end(),
            [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
  BLOSSOM_RETURN_IF_ERROR(AddBadWords(s.bad_words(), tokenizer, sp));
  BLOSSOM_RETURN_IF_ERROR(AddChoices(request, tokenizer, sp));
  BLOSSOM_RETURN_IF_ERROR(AddGrammar(request, guided_constraints, guided_mode, sp));

  const v1::StoppingParameters& t = request.stopping();
  StoppingParams& st = out.stopping;
  if (t.has_max_new_tokens()) {
    st.max_new_tokens = t.max_new_tokens();
  } else if (t.max_new_tokens_to_limit()) {
    const int64_t room =
        int64_t{limits.max_total_tokens} - static_cast<int64_t>(out.prompt_tokens.size());
    if (room < 1) {
      return Refusal(error_reason::kContextLengthExceeded, "stopping.max_new_tokens",
                     absl::StrCat("prompt (", out.prompt_tokens.size(),
                                  " tokens) leaves no room for new tokens within max_total_tokens (",
                                  limits.max_total_tokens, ")"));
    }
    st.max_new_tokens = static_cast<int32_t>(room);
  }
  if (t.has_min_new_tokens()) st.min_new_tokens = t.min_new_tokens();
  st.ignore_eos = t.ignore_eos();
  st.stop_token_ids.assign(t.stop_token_ids().begin(), t.stop_token_ids().end());
  st.stop_strings.assign(t.stop().begin(), t.stop().end());
  st.include_stop_string_in_output = t.include_stop_in_output();
  st.stop_at_text_end = t.stop_at_text_end();
  st.skip_special_tokens = !t.has_skip_special_tokens() || t.skip_special_tokens();
  out.priority = request.priority();
  return out;
}

std::string SystemFingerprint(const v1::ModelInfo& model_info) {
  return absl::StrCat("blossom-", model_info.version().empty() ? "dev" : model_info.version(), "-",
                      model_info.dtype().empty() ? "unknown" : model_info.dtype());
}

v1::FinishReason ToProtoFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEosToken: return v1::FINISH_REASON_EOS_TOKEN;
    case FinishReason::kStopToken: return v1::FINISH_REASON_STOP_TOKEN;
    case FinishReason::kStopString: return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError: return v1::FINISH_REASON_ERROR;
    case FinishReason::kAborted: return v1::FINISH_REASON_ABORTED;
    case FinishReason::kNone: break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void FillToken(const TokenEvent& token, const Tokenizer& tokenizer, bool with_logprobs,
               v1::Token* out) {
  out->set_id(token.token);
  const absl::string_view bytes = tokenizer.DecodedBytes(token.token, false);
  out->set_text(Utf8Lossy(bytes));
  out->set_token_bytes(bytes.data(), bytes.size());
  out->set_special(tokenizer.IsSpecial(token.token));
  if (with_logprobs) out->set_logprob(token.logprob);
  for (const TokenLogprob& top : token.top_logprobs) {
    v1::TopLogprob* t = out->add_top_logprobs();
    t->set_token_id(top.token);
    const absl::string_view top_bytes = tokenizer.DecodedBytes(top.token, false);
    t->set_token(Utf8Lossy(top_bytes));
    t->set_token_bytes(top_bytes.data(), top_bytes.size());
    t->set_special(tokenizer.IsSpecial(top.token));
    t->set_logprob(top.logprob);
  }
}

void FillPromptLogprobs(int32_t first_prompt_token, const std::vector<PromptLogprob>& scored,
                        const Tokenizer& tokenizer,
                        google::protobuf::RepeatedPtrField<v1::Token>* out) {
  v1::Token* first = out->Add();
  first->set_id(first_prompt_token);
  const absl::string_view first_bytes = tokenizer.DecodedBytes(first_prompt_token, false);
  first->set_text(Utf8Lossy(first_bytes));
  first->set_token_bytes(first_bytes.data(), first_bytes.size());
  for (const PromptLogprob& p : scored) {
    TokenEvent token;
    token.token = p.token;
    token.logprob = p.logprob;
    token.top_logprobs = p.top;
    v1::Token* scored_token = out->Add();
    FillToken(token, tokenizer, /*with_logprobs=*/true, scored_token);
    scored_token->set_rank(p.rank);
  }
}

void FillFinalInfo(const EngineEvent& final_event, const std::string& request_id,
                   v1::FinalInfo* out) {
  out->set_finish_reason(ToProtoFinishReason(final_event.finish_reason));
  out->set_matched_stop(final_event.token.matched_stop);
  out->set_request_id(request_id);
  out->set_seed(final_event.seed);
  out->set_max_new_tokens(final_event.max_new_tokens);
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
    timings->set_time_per_output_token_seconds(Seconds(t.first_token, t.finished) / (n - 1));
  }
  timings->set_preemptions(t.num_preemptions);
}

absl::Status DescribeEngineEnd(absl::Status status) {
  if (IsEngineShutdown(status)) {
    return WithRetryDelay(WithReason(std::move(status), error_reason::kShuttingDown),
                          kUnavailableRetryDelay);
  }
  // The engine's only other UNAVAILABLE is a model that failed for good (FailForGood): said so,
  // as the refusals that follow it are, so that a gateway does not take it for a lost connection.
  if (status.code() == absl::StatusCode::kUnavailable) {
    return WithReason(std::move(status), error_reason::kModelFailed);
  }
  // The request's own masks, bans, grammar and penalties left no token to sample (the sampler's
  // and the constraints' dead ends): a reason, so that clients can tell it from other failures.
  if (status.code() == absl::StatusCode::kFailedPrecondition) {
    return WithReason(std::move(status), error_reason::kNoTokenPossible);
  }
  return status;
}

absl::Status DescribeEngineRefusal(absl::Status status, const EngineRequest& request,
                                   int32_t vocab_size, absl::string_view prompt_field) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return WithRetryDelay(WithReason(std::move(status), error_reason::kQueueFull),
                            kQueueFullRetryDelay);
    case absl::StatusCode::kUnavailable:
      return WithRetryDelay(WithReason(std::move(status), error_reason::kShuttingDown),
                            kUnavailableRetryDelay);
    case absl::StatusCode::kFailedPrecondition:
      // The request's own masks and bans leave no first token (Engine::Submit): the reason a
      // generation that reaches such a dead end later ends with.
      return WithReason(std::move(status), error_reason::kNoTokenPossible);
    case absl::StatusCode::kInvalidArgument: break;
    default: return status;
  }
  const std::string message(status.message());
  std::string field = RejectedSamplingField(request.sampling, vocab_size);
  if (!field.empty()) {
    return WithReason(WithFieldViolation(std::move(status), absl::StrCat("sampling.", field), message),
                      error_reason::kInvalidSamplingParams);
  }
  field = RejectedStoppingField(request.stopping, vocab_size);
  if (!field.empty()) {
    const bool too_many =
        (field == "stop_token_ids" && request.stopping.stop_token_ids.size() > kMaxStopTokenIds) ||
        (field == "stop" && request.stopping.stop_strings.size() > kMaxStopStrings);
    return WithReason(WithFieldViolation(std::move(status), absl::StrCat("stopping.", field), message),
                      too_many ? error_reason::kTooManyStopSequences
                               : error_reason::kInvalidStoppingParams);
  }
  for (int32_t id : request.prompt_tokens) {
    if (id < 0 || id >= vocab_size) {
      return WithReason(WithFieldViolation(std::move(status), prompt_field, message),
                        error_reason::kInvalidPrompt);
    }
  }
  // What remains of Engine::Submit's checks is the scheduler's capacity for prompt +
  // max_new_tokens (max_total_tokens, the KV cache, the prefill budget).
  return WithReason(WithFieldViolation(std::move(status), "stopping.max_new_tokens", message),
                    error_reason::kContextLengthExceeded);
}

}  // namespace blossom
