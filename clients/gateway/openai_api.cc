#include "clients/gateway/openai_api.h"

#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clients/gateway/api_errors.h"
#include "kernels/status_macros.h"

namespace blossom::gateway::openai {
namespace {

using blossom::v1::FinishReason;
using blossom::v1::GenerateRequest;
using blossom::v1::Token;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int kMaxLogprobs = 20;

absl::Status Unsupported(const char* field, absl::string_view what) {
  return FieldError(field, absl::StrCat(what, " is not supported"));
}

// Fields shared by both endpoints.
absl::Status ParseCommon(const Json& body, CompletionRequest* out) {
  GenerateRequest& req = out->request;
  auto* sampling = req.mutable_sampling();
  auto* stopping = req.mutable_stopping();

  absl::optional<std::string> model;
  BLOSSOM_RETURN_IF_ERROR(GetString(body, "model", &model));
  if (model) {
    if (model->size() > kMaxModelNameBytes) {
      return FieldError("model", absl::StrCat("longer than ", kMaxModelNameBytes, " bytes"));
    }
    out->model = *model;
    req.set_model(*model);
  }
  absl::optional<std::string> user;
  BLOSSOM_RETURN_IF_ERROR(GetString(body, "user", &user));  // accepted and ignored

  absl::optional<int64_t> n;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "n", 1, kInt32Max, &n));
  if (n && *n != 1) return FieldError("n", "only n=1 is supported");

  absl::optional<double> temperature, top_p, typical_p, presence, frequency, min_p, repetition;
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "temperature", &temperature));
  BLOSSOM_RETURN_IF_ERROR(CheckRange("temperature", temperature, 0, false, 2, false));
  if (temperature) sampling->set_temperature(static_cast<float>(*temperature));
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "top_p", &top_p));
  BLOSSOM_RETURN_IF_ERROR(CheckRange("top_p", top_p, 0, true, 1, false));
  if (top_p) sampling->set_top_p(static_cast<float>(*top_p));
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "typical_p", &typical_p));  // vLLM's
  BLOSSOM_RETURN_IF_ERROR(CheckRange("typical_p", typical_p, 0, true, 1, false));
  if (typical_p) sampling->set_typical_p(static_cast<float>(*typical_p));
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "presence_penalty", &presence));
  BLOSSOM_RETURN_IF_ERROR(CheckRange("presence_penalty", presence, -2, false, 2, false));
  if (presence) sampling->set_presence_penalty(static_cast<float>(*presence));
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "frequency_penalty", &frequency));
  BLOSSOM_RETURN_IF_ERROR(CheckRange("frequency_penalty", frequency, -2, false, 2, false));
  if (frequency) sampling->set_frequency_penalty(static_cast<float>(*frequency));
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "min_p", &min_p));
  BLOSSOM_RETURN_IF_ERROR(CheckRange("min_p", min_p, 0, false, 1, false));
  if (min_p) sampling->set_min_p(static_cast<float>(*min_p));
  BLOSSOM_RETURN_IF_ERROR(GetNumber(body, "repetition_penalty", &repetition));
  BLOSSOM_RETURN_IF_ERROR(CheckRange("repetition_penalty", repetition, 0, true, 100, false));
  if (repetition) sampling->set_repetition_penalty(static_cast<float>(*repetition));
  absl::optional<int64_t> top_k, seed;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "top_k", -1, kInt32Max, &top_k));
  if (top_k) sampling->set_top_k(static_cast<int32_t>(*top_k));
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), &seed));
  if (seed) sampling->set_seed(static_cast<uint64_t>(*seed));

  absl::optional<int64_t> max_tokens, min_tokens;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "max_tokens", 1, kInt32Max, &max_tokens));
  if (!max_tokens && out->chat) {
    BLOSSOM_RETURN_IF_ERROR(GetInt(body, "max_completion_tokens", 1, kInt32Max, &max_tokens));
  }
  if (max_tokens) {
    stopping->set_max_new_tokens(static_cast<int32_t>(*max_tokens));
  } else if (out->chat) {
    // OpenAI (and vLLM) chat without a limit generate up to the context length; completions
    // keep OpenAI's default of 16 (the server's default).
    stopping->set_max_new_tokens_to_limit(true);
  }
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "min_tokens", 0, kInt32Max, &min_tokens));
  if (min_tokens) stopping->set_min_new_tokens(static_cast<int32_t>(*min_tokens));
  absl::optional<bool> ignore_eos;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "ignore_eos", &ignore_eos));
  if (ignore_eos) stopping->set_ignore_eos(*ignore_eos);
  // vLLM extensions: the matched stop string kept in the output, and the scheduling priority
  // (lower runs first in both vLLM and Blossom).
  absl::optional<bool> include_stop;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "include_stop_str_in_output", &include_stop));
  if (include_stop) stopping->set_include_stop_in_output(*include_stop);
  // vLLM's skip_special_tokens (default true): false keeps </s> and the like in the text.
  absl::optional<bool> skip_special;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "skip_special_tokens", &skip_special));
  if (skip_special) stopping->set_skip_special_tokens(*skip_special);
  absl::optional<int64_t> priority;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "priority", -kInt32Max, kInt32Max, &priority));
  if (priority) out->request.set_priority(static_cast<int32_t>(*priority));

  std::vector<std::string> stop;
  BLOSSOM_RETURN_IF_ERROR(GetStringList(body, "stop", kMaxStopSequences, &stop));
  for (std::string& s : stop) stopping->add_stop(std::move(s));
  auto ids = body.find("stop_token_ids");
  if (ids != body.end() && !ids->is_null()) {
    if (!ids->is_array()) return FieldError("stop_token_ids", "must be a list of integers");
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kInt32Max) {
        return FieldError("stop_token_ids", "must be a list of non-negative integers");
      }
      stopping->add_stop_token_ids(id.get<int32_t>());
    }
  }

  absl::optional<bool> stream;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "stream", &stream));
  out->stream = stream.value_or(false);
  auto options = body.find("stream_options");
  if (options != body.end() && !options->is_null()) {
    if (!out->stream) return FieldError("stream_options", "is only allowed with stream=true");
    if (!options->is_object()) return FieldError("stream_options", "must be an object");
    absl::optional<bool> include_usage;
    absl::Status s = GetBool(*options, "include_usage", &include_usage);
    if (!s.ok()) return FieldError("stream_options.include_usage", "must be a boolean");
    out->include_usage = include_usage.value_or(false);
  }

  auto bias = body.find("logit_bias");
  if (bias != body.end() && !bias->is_null() && !(bias->is_object() && bias->empty())) {
    return Unsupported("logit_bias", "logit_bias");
  }
  // vLLM extensions that would constrain, shorten or add to the output: refused, not ignored (a
  // client would otherwise get unconstrained text, or a response missing what it asked for).
  for (const char* field :
       {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "allowed_token_ids",
        "bad_words", "prompt_logprobs", "truncate_prompt_tokens"}) {
    auto it = body.find(field);
    if (it != body.end() && !it->is_null()) return Unsupported(field, field);
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const Json& body, GenerateRequest* req) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return FieldError("prompt", "is required");
  const Json* prompt = &*it;
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    prompt = &(*prompt)[0];  // a batch of one
  } else if (prompt->is_array() && !prompt->empty() &&
             ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    return FieldError("prompt", "only one prompt per request is supported");
  }
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) return FieldError("prompt", "must not be empty");
    req->set_text(prompt->get<std::string>());
    return absl::OkStatus();
  }
  if (prompt->is_array()) {
    if (prompt->empty()) return FieldError("prompt", "must not be empty");
    auto* ids = req->mutable_token_ids();
    for (const Json& id : *prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kInt32Max) {
        return FieldError("prompt", "token ids must be non-negative integers");
      }
      ids->add_ids(id.get<int32_t>());
    }
    return absl::OkStatus();
  }
  return FieldError("prompt", "must be a string, a list of one string, or a list of token ids");
}

Json TopLogprobsMap(const Token& token) {
  Json top = Json::object();
  for (const auto& t : token.top_logprobs()) top[t.token()] = t.logprob();
  return top;
}

// OpenAI's logprob `bytes`: the token's raw bytes (a byte-level BPE token may be part of a UTF-8
// character, which `text` renders lossily). A server predating token_bytes sends none: then
// the text's bytes, the best left.
Json Bytes(const std::string& raw, const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : raw.empty() ? text : raw) bytes.push_back(static_cast<int>(c));
  return bytes;
}

Json ChatTokenLogprob(const Token& token) {
  Json top = Json::array();
  for (const auto& t : token.top_logprobs()) {
    top.push_back({{"token", t.token()},
                   {"logprob", t.logprob()},
                   {"bytes", Bytes(t.token_bytes(), t.token())}});
  }
  return {{"token", token.text()},
          {"logprob", token.has_logprob() ? Json(token.logprob()) : Json(nullptr)},
          {"bytes", Bytes(token.token_bytes(), token.text())},
          {"top_logprobs", top}};
}

Json UsageJson(const blossom::v1::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens()},
          {"completion_tokens", usage.generated_tokens()},
          {"total_tokens", usage.prompt_tokens() + usage.generated_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens()}}}};
}

std::string Event(const Json& json) { return absl::StrCat("data: ", Dump(json), "\n\n"); }

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body) {
  BLOSSOM_ASSIGN_OR_RETURN(Json json, ParseJsonObject(body));
  CompletionRequest out;
  out.chat = false;
  BLOSSOM_RETURN_IF_ERROR(ParsePrompt(json, &out.request));
  BLOSSOM_RETURN_IF_ERROR(ParseCommon(json, &out));
  absl::optional<bool> echo;
  BLOSSOM_RETURN_IF_ERROR(GetBool(json, "echo", &echo));
  out.echo = echo.value_or(false);
  if (out.echo && out.stream) return Unsupported("echo", "echo with stream=true");
  absl::optional<int64_t> best_of, logprobs;
  BLOSSOM_RETURN_IF_ERROR(GetInt(json, "best_of", 1, kInt32Max, &best_of));
  if (best_of && *best_of != 1) return FieldError("best_of", "only best_of=1 is supported");
  absl::optional<std::string> suffix;
  BLOSSOM_RETURN_IF_ERROR(GetString(json, "suffix", &suffix));
  if (suffix && !suffix->empty()) return Unsupported("suffix", "suffix");
  BLOSSOM_RETURN_IF_ERROR(GetInt(json, "logprobs", 0, kMaxLogprobs, &logprobs));
  if (logprobs) {
    out.logprobs = true;
    out.top_logprobs = static_cast<int>(*logprobs);
    out.request.mutable_sampling()->set_logprobs(static_cast<int32_t>(*logprobs));
  }
  // The echoed prompt tokens' logprobs, or their texts for a token-id prompt (it has no text of
  // its own). Only then: prompt logprobs cost an LM-head row per prompt token (250,880 logits
  // each for BLOOM) and bypass the prefix cache, where a text prompt's echo needs neither.
  if (out.echo && (out.logprobs || !out.request.has_text())) {
    out.request.mutable_sampling()->set_prompt_logprobs(out.top_logprobs);
  }
  return out;
}

absl::StatusOr<CompletionRequest> ParseChatRequest(absl::string_view body,
                                                   const ChatTemplate& chat_template) {
  BLOSSOM_ASSIGN_OR_RETURN(Json json, ParseJsonObject(body));
  CompletionRequest out;
  out.chat = true;
  auto messages = json.find("messages");
  if (messages == json.end() || messages->is_null()) return FieldError("messages", "is required");
  BLOSSOM_ASSIGN_OR_RETURN(std::string prompt, RenderChatPrompt(*messages, chat_template));
  out.request.set_text(std::move(prompt));
  BLOSSOM_RETURN_IF_ERROR(ParseCommon(json, &out));
  absl::optional<bool> logprobs;
  absl::optional<int64_t> top_logprobs;
  BLOSSOM_RETURN_IF_ERROR(GetBool(json, "logprobs", &logprobs));
  BLOSSOM_RETURN_IF_ERROR(GetInt(json, "top_logprobs", 0, kMaxLogprobs, &top_logprobs));
  if (top_logprobs && !logprobs.value_or(false)) {
    return FieldError("top_logprobs", "requires logprobs=true");
  }
  if (logprobs.value_or(false)) {
    out.logprobs = true;
    out.top_logprobs = static_cast<int>(top_logprobs.value_or(0));
    out.request.mutable_sampling()->set_logprobs(out.top_logprobs);
  }
  for (const char* field : {"tools", "functions"}) {
    auto it = json.find(field);
    if (it != json.end() && !it->is_null() && !(it->is_array() && it->empty())) {
      return Unsupported(field, field);
    }
  }
  auto format = json.find("response_format");
  if (format != json.end() && !format->is_null()) {
    if (!format->is_object() || format->value("type", Json()) != "text") {
      return FieldError("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  return out;
}

const char* FinishReasonString(FinishReason reason) {
  switch (reason) {
    case blossom::v1::FINISH_REASON_LENGTH: return "length";
    case blossom::v1::FINISH_REASON_EOS_TOKEN:
    case blossom::v1::FINISH_REASON_STOP_TOKEN:
    case blossom::v1::FINISH_REASON_STOP_STRING: return "stop";
    // OpenAI clients know only "stop" and "length" here (vLLM's "abort" is not OpenAI's): output
    // cut short by a cancellation or an error is "length", i.e. not a natural end.
    case blossom::v1::FINISH_REASON_CANCELLED:
    case blossom::v1::FINISH_REASON_ERROR: return "length";
    default: return "stop";
  }
}

Json CompletionResponse(const CompletionRequest& request,
                        const blossom::v1::GenerateResponse& response, const std::string& id,
                        int64_t created) {
  const char* finish = FinishReasonString(response.final().finish_reason());
  Json choice;
  if (request.chat) {
    Json logprobs = nullptr;
    if (request.logprobs) {
      Json content = Json::array();
      for (const Token& t : response.tokens()) content.push_back(ChatTokenLogprob(t));
      logprobs = {{"content", content}};
    }
    choice = {{"index", 0},
              {"message", {{"role", "assistant"}, {"content", response.text()}}},
              {"logprobs", logprobs},
              {"finish_reason", finish}};
  } else {
    Json logprobs = nullptr;
    std::string prompt_text;
    if (request.echo) {
      if (request.request.has_text()) {
        prompt_text = request.request.text();
      } else {
        for (const Token& t : response.prompt_logprobs()) prompt_text += t.text();
      }
    }
    if (request.logprobs) {
      Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
           offsets = Json::array();
      size_t offset = 0;
      // Echoed prompt tokens first; the first has no logprob and no alternatives (null).
      for (const Token& t : response.prompt_logprobs()) {
        tokens.push_back(t.text());
        token_logprobs.push_back(t.has_logprob() ? Json(t.logprob()) : Json(nullptr));
        top.push_back(t.has_logprob() ? TopLogprobsMap(t) : Json(nullptr));
        offsets.push_back(offset);
        offset += t.text().size();
      }
      for (const Token& t : response.tokens()) {
        tokens.push_back(t.text());
        token_logprobs.push_back(t.has_logprob() ? Json(t.logprob()) : Json(nullptr));
        top.push_back(TopLogprobsMap(t));
        offsets.push_back(offset);
        offset += t.text().size();
      }
      logprobs = {{"tokens", tokens},
                  {"token_logprobs", token_logprobs},
                  {"top_logprobs", top},
                  {"text_offset", offsets}};
    }
    choice = {{"index", 0},
              {"text", prompt_text + response.text()},
              {"logprobs", logprobs},
              {"finish_reason", finish}};
  }
  return {{"id", id},
          {"object", request.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", request.model},
          {"system_fingerprint", response.final().system_fingerprint()},
          {"choices", Json::array({choice})},
          {"usage", UsageJson(response.final().usage())}};
}

StreamEncoder::StreamEncoder(const CompletionRequest& request, std::string id, int64_t created)
    : request_(request), id_(std::move(id)), created_(created) {}

Json StreamEncoder::Chunk(Json choice) const {
  Json chunk = {{"id", id_},
                {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", request_.model},
                {"choices", choice.is_null() ? Json::array() : Json::array({choice})}};
  if (request_.include_usage) chunk["usage"] = nullptr;
  if (!system_fingerprint_.empty()) chunk["system_fingerprint"] = system_fingerprint_;
  return chunk;
}

Json StreamEncoder::LogprobsFor(const Token& token) {
  if (request_.chat) return {{"content", Json::array({ChatTokenLogprob(token)})}};
  Json out = {{"tokens", Json::array({token.text()})},
              {"token_logprobs", Json::array({token.has_logprob() ? Json(token.logprob()) : Json(nullptr)})},
              {"top_logprobs", Json::array({TopLogprobsMap(token)})},
              {"text_offset", Json::array({text_offset_})}};
  text_offset_ += token.text().size();
  return out;
}

std::string StreamEncoder::Start() {
  if (!request_.chat) return "";
  return Event(Chunk({{"index", 0},
                      {"delta", {{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}}));
}

std::string StreamEncoder::OnMessage(const blossom::v1::GenerateStreamResponse& message) {
  const bool final = message.has_final();
  if (final) system_fingerprint_ = message.final().system_fingerprint();
  const bool with_logprobs = request_.logprobs && message.has_token();
  std::string events;
  if (!message.text_delta().empty() || with_logprobs || final) {
    Json choice = {{"index", 0},
                   {"logprobs", with_logprobs ? LogprobsFor(message.token()) : Json(nullptr)},
                   {"finish_reason",
                    final ? Json(FinishReasonString(message.final().finish_reason())) : Json(nullptr)}};
    if (request_.chat) {
      choice["delta"] = message.text_delta().empty() && final ? Json::object()
                                                               : Json{{"content", message.text_delta()}};
    } else {
      choice["text"] = message.text_delta();
    }
    events += Event(Chunk(choice));
  }
  if (final) {
    if (request_.include_usage) {
      Json usage = Chunk(nullptr);
      usage["usage"] = UsageJson(message.final().usage());
      events += Event(usage);
    }
    events += "data: [DONE]\n\n";
  }
  return events;
}

std::string StreamEncoder::Error(int http_status, absl::string_view message) {
  return absl::StrCat("data: ", OpenAIErrorJson(http_status, message, ""), "\n\ndata: [DONE]\n\n");
}

}  // namespace blossom::gateway::openai
