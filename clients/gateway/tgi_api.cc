#include "clients/gateway/tgi_api.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/best_of.h"
#include "clients/gateway/structured_outputs.h"
#include "engine/text/utf8.h"
#include "kernels/status_macros.h"

namespace blossom::gateway::tgi {
namespace {

using blossom::v1::FinishReason;
using blossom::v1::Token;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Fields we cannot honour: absent, null, false or 0 are fine, anything else is refused.
absl::Status RejectIfSet(const Json& params, const char* field) {
  auto it = params.find(field);
  if (it == params.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) {
    return absl::OkStatus();
  }
  if (it->is_number_integer() && it->get<int64_t>() == 0) return absl::OkStatus();
  return FieldError(absl::StrCat("parameters.", field), "is not supported");
}

absl::Status InParams(absl::Status s) {
  if (s.ok() || ParamOf(s).empty()) return s;
  std::string field = ParamOf(s);
  std::string message(s.message().substr(field.size() + 2));
  return FieldError(absl::StrCat("parameters.", field), message);
}

// TGI's Token; `special` as TGI sets it: the id is one of the tokenizer's special tokens.
Json TokenJson(const Token& token) {
  return {{"id", token.id()},
          {"text", token.text()},
          {"logprob", token.has_logprob() ? Json(token.logprob()) : Json(nullptr)},
          {"special", token.special()}};
}

// The server's logprobs cap (SamplingParams: kMaxLogprobs).
constexpr int kMaxTopNTokens = 20;

// TGI's details.prefill: every prompt token, the first one's logprob null.
Json PrefillJson(const blossom::v1::GenerateResponse& response) {
  Json prefill = Json::array();
  for (const Token& t : response.prompt_logprobs()) {
    prefill.push_back({{"id", t.id()},
                       {"text", t.text()},
                       {"logprob", t.has_logprob() ? Json(t.logprob()) : Json(nullptr)}});
  }
  return prefill;
}

// One token's top_n_tokens alternatives, most likely first (TGI's top_tokens entry).
Json TopTokenJson(const Token& token) {
  Json top = Json::array();
  for (const auto& t : token.top_logprobs()) {
    top.push_back({{"id", t.token_id()}, {"text", t.token()}, {"logprob", t.logprob()},
                   {"special", t.special()}});
  }
  return top;
}

// details.top_tokens: one list per generated token; empty without top_n_tokens.
Json TopTokensJson(const GenerateRequest& request,
                   const google::protobuf::RepeatedPtrField<Token>& tokens) {
  Json all = Json::array();
  if (request.top_n_tokens <= 0) return all;
  for (const Token& t : tokens) all.push_back(TopTokenJson(t));
  return all;
}

// TGI reports a seed only when sampling (greedy decoding uses none).
Json SeedJson(const GenerateRequest& request, uint64_t seed) {
  const auto& sampling = request.request.sampling();
  if (sampling.has_temperature() && sampling.temperature() == 0.0f) return nullptr;
  return seed;
}

// A stop sequence matched inside a token cuts generated_text there ("ro" in "row"), as the stream
// cuts its last text: the non-special tokens' texts are cut the same way, so that they still join
// into generated_text. Left as they are when they do not start with it (nothing was cut).
void CutAtTheGeneratedText(const blossom::v1::GenerateResponse& response, Json* tokens) {
  std::string joined;
  for (const Json& token : *tokens) {
    if (!token["special"].get<bool>()) joined += token["text"].get<std::string>();
  }
  const std::string& text = response.text();
  if (joined.size() <= text.size() || joined.compare(0, text.size(), text) != 0) return;
  size_t left = text.size();
  for (Json& token : *tokens) {
    if (token["special"].get<bool>()) continue;
    const std::string piece = token["text"].get<std::string>();
    if (piece.size() > left) token["text"] = piece.substr(0, left);
    left -= std::min(left, piece.size());
  }
}

}  // namespace

const char* FinishReasonString(const blossom::v1::FinalInfo& final) {
  // TGI's StoppingCriteria checks the length first: an EOS or a stop sequence on the last
  // allowed token is "length" there (the OpenAI routes say "stop", as vLLM).
  if (final.max_new_tokens() > 0 && final.usage().generated_tokens() >= final.max_new_tokens()) {
    return "length";
  }
  switch (final.finish_reason()) {
    case blossom::v1::FINISH_REASON_EOS_TOKEN: return "eos_token";
    case blossom::v1::FINISH_REASON_STOP_TOKEN:
    case blossom::v1::FINISH_REASON_STOP_STRING: return "stop_sequence";
    default: return "length";
  }
}

absl::StatusOr<GenerateRequest> ParseGenerateRequest(absl::string_view body, bool compat_route,
                                                     bool stream) {
  BLOSSOM_ASSIGN_OR_RETURN(Json json, ParseJsonObject(body));
  GenerateRequest out;
  absl::optional<std::string> inputs;
  BLOSSOM_RETURN_IF_ERROR(GetString(json, "inputs", &inputs));
  if (!inputs) return FieldError("inputs", "is required");
  if (inputs->empty()) return FieldError("inputs", "must not be empty");
  out.inputs = *inputs;
  out.request.set_text(*inputs);

  Json params = Json::object();
  auto it = json.find("parameters");
  if (it != json.end() && !it->is_null()) {
    if (!it->is_object()) return FieldError("parameters", "must be an object");
    params = *it;
  }
  auto* sampling = out.request.mutable_sampling();
  auto* stopping = out.request.mutable_stopping();

  for (const char* field : {"watermark", "adapter_id"}) {
    BLOSSOM_RETURN_IF_ERROR(RejectIfSet(params, field));
  }
  BLOSSOM_RETURN_IF_ERROR(ParseTgiGrammar(params, body, sampling));
  // TGI's truncate: keep the last N input tokens (the server truncates after tokenizing).
  absl::optional<int64_t> truncate;
  BLOSSOM_RETURN_IF_ERROR(InParams(GetInt(params, "truncate", 1, kInt32Max, &truncate)));
  if (truncate) out.request.set_truncate_prompt_tokens(static_cast<int32_t>(*truncate));
  absl::optional<int64_t> best_of;
  BLOSSOM_RETURN_IF_ERROR(InParams(GetInt(params, "best_of", 1, kMaxBestOf, &best_of)));

  absl::optional<double> temperature, top_p, typical_p, repetition, frequency;
  BLOSSOM_RETURN_IF_ERROR(InParams(GetNumber(params, "temperature", &temperature)));
  BLOSSOM_RETURN_IF_ERROR(InParams(CheckRange("temperature", temperature, 0, true, 100, false)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetNumber(params, "top_p", &top_p)));
  BLOSSOM_RETURN_IF_ERROR(InParams(CheckRange("top_p", top_p, 0, true, 1, true)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetNumber(params, "typical_p", &typical_p)));
  BLOSSOM_RETURN_IF_ERROR(InParams(CheckRange("typical_p", typical_p, 0, true, 1, true)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetNumber(params, "repetition_penalty", &repetition)));
  BLOSSOM_RETURN_IF_ERROR(
      InParams(CheckRange("repetition_penalty", repetition, 0, true, 100, false)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetNumber(params, "frequency_penalty", &frequency)));
  BLOSSOM_RETURN_IF_ERROR(InParams(CheckRange("frequency_penalty", frequency, -2, false, 2, false)));
  absl::optional<bool> decoder_input_details;
  BLOSSOM_RETURN_IF_ERROR(
      InParams(GetBool(params, "decoder_input_details", &decoder_input_details)));
  absl::optional<int64_t> top_n_tokens;
  BLOSSOM_RETURN_IF_ERROR(
      InParams(GetInt(params, "top_n_tokens", 0, kMaxTopNTokens, &top_n_tokens)));
  absl::optional<int64_t> top_k, max_new_tokens;
  absl::optional<uint64_t> seed;  // TGI's seed is a u64: the whole range is accepted
  BLOSSOM_RETURN_IF_ERROR(InParams(GetInt(params, "top_k", 1, kInt32Max, &top_k)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetInt(params, "max_new_tokens", 1, kInt32Max, &max_new_tokens)));
  BLOSSOM_RETURN_IF_ERROR(
      InParams(GetUint64(params, "seed", &seed)));
  // ignore_eos is an extension (vLLM accepts it too): benchmarks and tests need exact lengths.
  absl::optional<bool> do_sample, details, return_full_text, ignore_eos;
  BLOSSOM_RETURN_IF_ERROR(InParams(GetBool(params, "ignore_eos", &ignore_eos)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetBool(params, "do_sample", &do_sample)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetBool(params, "details", &details)));
  BLOSSOM_RETURN_IF_ERROR(InParams(GetBool(params, "return_full_text", &return_full_text)));
  std::vector<std::string> stop;
  BLOSSOM_RETURN_IF_ERROR(InParams(GetStringList(params, "stop", kMaxStopSequences, &stop)));
  // TGI keeps a matched stop sequence in generated_text (its decode of every generated token),
  // unlike OpenAI and vLLM.
  stopping->set_include_stop_in_output(true);
  // TGI stops only when the text ends with a stop sequence after a token (its
  // StopSequenceCriteria is the regex "<stop>$" over the text so far).
  stopping->set_stop_at_text_end(true);

  // TGI samples when asked to or when a sampling parameter would change anything ("has
  // warpers"): temperature 1 alone is greedy. (top_p and typical_p are below 1 once valid.)
  const bool sample = do_sample.value_or(false) || (temperature && *temperature != 1.0) ||
                      top_k || top_p || typical_p;
  if (!sample) {
    sampling->set_temperature(0);  // greedy
  } else if (temperature) {
    sampling->set_temperature(static_cast<float>(*temperature));
  }
  if (top_k) sampling->set_top_k(static_cast<int32_t>(*top_k));
  if (top_p) sampling->set_top_p(static_cast<float>(*top_p));
  if (typical_p) sampling->set_typical_p(static_cast<float>(*typical_p));
  if (repetition) sampling->set_repetition_penalty(static_cast<float>(*repetition));
  if (frequency) sampling->set_frequency_penalty(static_cast<float>(*frequency));
  if (seed) sampling->set_seed(*seed);
  if (max_new_tokens) {
    stopping->set_max_new_tokens(static_cast<int32_t>(*max_new_tokens));
  } else {
    // TGI since 1.1.1 (PR #1097): no max_new_tokens means max_total_tokens - input length.
    stopping->set_max_new_tokens_to_limit(true);
  }
  for (std::string& s : stop) stopping->add_stop(std::move(s));
  if (ignore_eos) stopping->set_ignore_eos(*ignore_eos);
  // As TGI: decoder_input_details asks for details too (the prefill list lives in them).
  out.details = details.value_or(false) || decoder_input_details.value_or(false);
  // Details carry each token's logprob (0: the chosen token's only). A stream without details
  // leaves it null, unlike TGI: a logprob costs a pass over the vocabulary per token (an extra
  // kernel on CUDA, a log-softmax on the CPU backend) that such a client did not ask for.
  if (out.details) sampling->set_logprobs(0);
  out.top_n_tokens = static_cast<int>(top_n_tokens.value_or(0));
  if (out.top_n_tokens > 0) sampling->set_logprobs(out.top_n_tokens);
  out.decoder_input_details = decoder_input_details.value_or(false);
  if (out.decoder_input_details) sampling->set_prompt_logprobs(0);
  out.return_full_text = return_full_text.value_or(compat_route);
  out.best_of = static_cast<int>(best_of.value_or(1));
  if (out.best_of > 1) {
    // TGI's rules: candidates of greedy decoding would all be the same, and one seed would
    // make them the same samples.
    if (!sample) {
      return FieldError("parameters.best_of",
                        "above 1 needs sampling (do_sample, or temperature other than 1, top_k, "
                        "top_p or typical_p below 1): greedy candidates would all be the same");
    }
    if (seed) return FieldError("parameters.seed", "must not be set when best_of is above 1");
    if (!sampling->has_logprobs()) sampling->set_logprobs(0);  // ranks the candidates
  }
  if (stream && out.decoder_input_details) {
    // As TGI: a stream has no place for the prefill list.
    return FieldError("parameters.decoder_input_details",
                      "is not supported when streaming tokens");
  }
  if (stream && out.best_of > 1) {
    // As TGI: the best candidate is known only at the end.
    return FieldError("parameters.best_of", "is not supported when streaming tokens");
  }
  return out;
}

Json GenerateResponse(const GenerateRequest& request, const blossom::v1::GenerateResponse& response) {
  Json out = {{"generated_text", request.return_full_text ? request.inputs + response.text()
                                                          : response.text()}};
  if (request.details) {
    const auto& final = response.final();
    // Each token's text as the stream gives it (StreamEncoder, TGI's incremental decode): a
    // character split over byte tokens is the text of the token that completes it ("" before),
    // so the texts join into generated_text instead of holding U+FFFD halves. A special token
    // keeps its own text, as in the stream.
    Json tokens = Json::array();
    std::string pending;  // bytes of a character not complete yet
    for (int i = 0; i < response.tokens_size(); ++i) {
      const Token& t = response.tokens(i);
      Json token = TokenJson(t);
      if (!t.special() && !t.token_bytes().empty()) {
        pending += t.token_bytes();
        std::string text;
        pending.erase(0, AppendUtf8Lossy(pending, /*final=*/i + 1 == response.tokens_size(),
                                         &text));
        token["text"] = std::move(text);
      }
      tokens.push_back(std::move(token));
    }
    CutAtTheGeneratedText(response, &tokens);
    out["details"] = {{"finish_reason", FinishReasonString(final)},
                      {"generated_tokens", final.usage().generated_tokens()},
                      {"seed", SeedJson(request, final.seed())},
                      {"prefill", PrefillJson(response)},
                      {"tokens", tokens},
                      {"top_tokens", TopTokensJson(request, response.tokens())}};
  }
  return out;
}

Json BestOfResponse(const GenerateRequest& request,
                    const std::vector<blossom::v1::GenerateResponse>& candidates) {
  const std::vector<size_t> ranked = RankByMeanLogprob(candidates, 0, candidates.size());
  Json out = GenerateResponse(request, candidates[ranked.front()]);
  if (!request.details) return out;
  Json others = Json::array();
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i == ranked.front()) continue;
    Json one = GenerateResponse(request, candidates[i]);
    Json entry = {{"generated_text", one["generated_text"]}};
    for (auto& [key, value] : one["details"].items()) entry[key] = value;
    others.push_back(std::move(entry));
  }
  out["details"]["best_of_sequences"] = std::move(others);
  return out;
}

std::string StreamEncoder::OnMessage(const blossom::v1::GenerateStreamResponse& message) {
  text_ += message.text_delta();
  const bool final = message.has_final();
  // A message with neither token nor final carries text released just before an error status
  // (a partial stop string or an incomplete character held back at the failure): it gets an
  // event of its own, as a final without a token does, so the text reaches the client before
  // the error event.
  if (!message.has_token() && !final && message.text_delta().empty()) return "";
  Json token;
  if (message.has_token()) {
    token = TokenJson(message.token());
    // TGI streams each token's incremental decode: "" while a character split over byte tokens
    // is incomplete, the whole character with the token that completes it; clients join these
    // texts. A special token keeps its own text (TGI decodes it with specials kept).
    if (!message.token().special()) token["text"] = message.text_delta();
  } else {
    // A message without a token still needs a token in TGI's event shape; it carries the text
    // released at the end, if any.
    token = {{"id", 0},
             {"text", message.text_delta()},
             {"logprob", nullptr},
             {"special", message.text_delta().empty()}};
  }
  Json event = {{"index", index_++}, {"token", token}, {"generated_text", nullptr},
                {"details", nullptr}};
  // As TGI (skip_serializing_if = "Vec::is_empty"): the key only when there are top tokens.
  if (request_.top_n_tokens > 0 && message.has_token()) {
    Json top_tokens = TopTokenJson(message.token());
    if (!top_tokens.empty()) event["top_tokens"] = std::move(top_tokens);
  }
  if (final) {
    event["generated_text"] = request_.return_full_text ? request_.inputs + text_ : text_;
    if (request_.details) {
      event["details"] = {{"finish_reason", FinishReasonString(message.final())},
                          {"generated_tokens", message.final().usage().generated_tokens()},
                          {"seed", SeedJson(request_, message.final().seed())},
                          {"input_length", message.final().usage().prompt_tokens()}};
    }
  }
  return absl::StrCat("data:", Dump(event), "\n\n");
}

std::string StreamEncoder::Error(absl::string_view error_json) {
  return absl::StrCat("data:", error_json, "\n\n");
}

absl::StatusOr<blossom::v1::TokenizeRequest> ParseTokenizeRequest(absl::string_view body) {
  BLOSSOM_ASSIGN_OR_RETURN(Json json, ParseJsonObject(body));
  absl::optional<std::string> inputs;
  BLOSSOM_RETURN_IF_ERROR(GetString(json, "inputs", &inputs));
  if (!inputs) return FieldError("inputs", "is required");
  absl::optional<bool> add_special;
  BLOSSOM_RETURN_IF_ERROR(GetBool(json, "add_special_tokens", &add_special));
  blossom::v1::TokenizeRequest request;
  request.set_text(*inputs);
  request.set_add_special_tokens(add_special.value_or(true));
  return request;
}

namespace {

// The input's bytes [start, stop) when both ends fall on character boundaries, else "" (TGI's
// `input.get(start..stop)`, which is None inside a character, as where byte-level tokens
// split one).
std::string InputSlice(absl::string_view input, int64_t start, int64_t stop) {
  const auto boundary = [&](int64_t at) {
    return at == static_cast<int64_t>(input.size()) ||
           (static_cast<unsigned char>(input[static_cast<size_t>(at)]) & 0xC0) != 0x80;
  };
  if (start < 0 || stop < start || stop > static_cast<int64_t>(input.size()) ||
      !boundary(start) || !boundary(stop)) {
    return "";
  }
  return std::string(input.substr(static_cast<size_t>(start), static_cast<size_t>(stop - start)));
}

}  // namespace

Json TokenizeResponse(absl::string_view input, const blossom::v1::TokenizeResponse& response) {
  Json out = Json::array();
  for (int i = 0; i < response.ids_size(); ++i) {
    Json t = {{"id", response.ids(i)}};
    if (i < response.offsets_size()) {
      t["text"] = InputSlice(input, response.offsets(i).start(), response.offsets(i).end());
      t["start"] = response.offsets(i).start();
      t["stop"] = response.offsets(i).end();
    } else {
      t["text"] = "";
    }
    out.push_back(t);
  }
  return out;
}

Json InfoJson(const blossom::v1::ModelInfo& info, const std::string& model_id) {
  const auto& limits = info.limits();
  return {{"model_id", model_id},
          {"model_sha", nullptr},
          {"model_dtype", info.dtype()},
          {"model_device_type", info.backend()},
          {"model_pipeline_tag", "text-generation"},
          {"max_concurrent_requests", limits.max_batch_size() + limits.max_waiting_requests()},
          {"max_best_of", kMaxBestOf},
          // What these routes accept: the gateway's own limit unless the server's is lower.
          {"max_stop_sequences",
           limits.max_stop_strings() > 0
               ? std::min<int64_t>(limits.max_stop_strings(), kMaxStopSequences)
               : static_cast<int64_t>(kMaxStopSequences)},
          {"max_input_tokens", limits.max_input_tokens()},
          {"max_input_length", limits.max_input_tokens()},
          {"max_total_tokens", limits.max_total_tokens()},
          {"waiting_served_ratio", 0.0},
          {"max_batch_total_tokens", limits.max_batched_tokens()},
          {"max_waiting_tokens", 0},
          {"max_batch_size", limits.max_batch_size()},
          {"validation_workers", 1},
          {"max_client_batch_size", 1},
          {"router", "blossom-gateway"},
          {"version", info.version()},
          {"sha", nullptr},
          {"docker_label", nullptr}};
}

}  // namespace blossom::gateway::tgi
