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
// Choices (prompts x n) one request may ask for: each is a generation of its own.
constexpr int kMaxChoices = 128;

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
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "n", 1, kMaxChoices, &n));
  out->n = static_cast<int>(n.value_or(1));

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
  // Completions with echo may ask for max_tokens 0: the prompt scored, nothing generated (vLLM;
  // scoring clients send it). The engine generates one token, which the response leaves out.
  if (!out->chat) {
    absl::optional<bool> echo;
    BLOSSOM_RETURN_IF_ERROR(GetBool(body, "echo", &echo));
    out->echo = echo.value_or(false);
  }
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "max_tokens", out->echo ? 0 : 1, kInt32Max, &max_tokens));
  if (max_tokens && *max_tokens == 0) {
    out->prompt_only = true;
    max_tokens = 1;
  }
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
  // vLLM's truncate_prompt_tokens: keep the last N prompt tokens (the server truncates).
  absl::optional<int64_t> truncate;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "truncate_prompt_tokens", 1, kInt32Max, &truncate));
  if (truncate) req.set_truncate_prompt_tokens(static_cast<int32_t>(*truncate));
  absl::optional<int64_t> priority;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "priority", -kInt32Max, kInt32Max, &priority));
  if (priority) out->request.set_priority(static_cast<int32_t>(*priority));

  std::vector<std::string> stop;
  BLOSSOM_RETURN_IF_ERROR(GetStringList(body, "stop", kMaxOpenAIStopSequences, &stop));
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
        "bad_words", "prompt_logprobs"}) {
    auto it = body.find(field);
    if (it != body.end() && !it->is_null()) return Unsupported(field, field);
  }
  absl::optional<bool> beam_search;  // vLLM's; false is what its clients send by default
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "use_beam_search", &beam_search));
  if (beam_search.value_or(false)) return Unsupported("use_beam_search", "beam search");
  return absl::OkStatus();
}

// One prompt: a string, or a list of token ids.
absl::Status ParseOnePrompt(const Json& prompt, GenerateRequest* req) {
  if (prompt.is_string()) {
    if (prompt.get_ref<const std::string&>().empty()) return FieldError("prompt", "must not be empty");
    req->set_text(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (prompt.is_array()) {
    if (prompt.empty()) return FieldError("prompt", "must not be empty");
    auto* ids = req->mutable_token_ids();
    for (const Json& id : prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kInt32Max) {
        return FieldError("prompt", "token ids must be non-negative integers");
      }
      ids->add_ids(id.get<int32_t>());
    }
    return absl::OkStatus();
  }
  return FieldError("prompt",
                    "must be a string, a list of strings, a list of token ids or a list of lists "
                    "of token ids");
}

// vLLM's prompt forms: a string, a list of token ids (one prompt each), or a list of strings or
// of token-id lists (a batch: one choice per prompt).
absl::Status ParsePrompts(const Json& body, std::vector<GenerateRequest>* prompts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return FieldError("prompt", "is required");
  const Json& prompt = *it;
  const bool batch =
      prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array());
  if (!batch) {
    prompts->emplace_back();
    return ParseOnePrompt(prompt, &prompts->back());
  }
  if (prompt.size() > static_cast<size_t>(kMaxChoices)) {
    return FieldError("prompt", absl::StrCat("at most ", kMaxChoices, " prompts per request"));
  }
  for (const Json& one : prompt) {
    if (one.is_string() != prompt[0].is_string()) {
      return FieldError("prompt", "a batch must be all strings or all token-id lists");
    }
    prompts->emplace_back();
    BLOSSOM_RETURN_IF_ERROR(ParseOnePrompt(one, &prompts->back()));
  }
  return absl::OkStatus();
}

// request.batch: each prompt n times (prompt-major, OpenAI's choice order). A seed becomes
// seed + i for the i-th choice of a prompt, so that n samples differ and are reproducible.
absl::Status FillBatch(const std::vector<GenerateRequest>& prompts, CompletionRequest* out) {
  const int64_t choices = static_cast<int64_t>(prompts.size()) * out->n;
  if (choices > kMaxChoices) {
    return FieldError("n", absl::StrCat("prompts x n must be at most ", kMaxChoices, ", got ",
                                        choices));
  }
  if (choices == 1) return absl::OkStatus();
  for (const GenerateRequest& prompt : prompts) {
    for (int i = 0; i < out->n; ++i) {
      GenerateRequest one = out->request;
      one.clear_prompt();
      if (prompt.has_text()) {
        one.set_text(prompt.text());
      } else {
        *one.mutable_token_ids() = prompt.token_ids();
      }
      if (one.sampling().has_seed()) {
        one.mutable_sampling()->set_seed(one.sampling().seed() + static_cast<uint64_t>(i));
      }
      out->batch.push_back(std::move(one));
    }
  }
  return absl::OkStatus();
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

// vLLM's stop_reason: the stop string that ended the text, or the id of the stop token (from
// stop_token_ids); null for EOS, the length limit and the rest.
Json StopReason(const blossom::v1::FinalInfo& final, absl::optional<int32_t> last_token) {
  if (final.finish_reason() == blossom::v1::FINISH_REASON_STOP_STRING) return final.matched_stop();
  if (final.finish_reason() == blossom::v1::FINISH_REASON_STOP_TOKEN && last_token) {
    return *last_token;
  }
  return nullptr;
}

// OpenAI's text_offset counts characters (vLLM: Python's len), not bytes: the code points of a
// token's text (a partial character shows as one U+FFFD).
size_t Characters(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
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
  std::vector<GenerateRequest> prompts;
  BLOSSOM_RETURN_IF_ERROR(ParsePrompts(json, &prompts));
  out.request = prompts.front();
  BLOSSOM_RETURN_IF_ERROR(ParseCommon(json, &out));
  if (out.echo && out.stream) return Unsupported("echo", "echo with stream=true");
  if (out.echo && out.request.truncate_prompt_tokens() > 0) {
    // The echo would show the whole prompt while the model saw its end only.
    return Unsupported("truncate_prompt_tokens", "truncate_prompt_tokens with echo");
  }
  absl::optional<int64_t> best_of, logprobs;
  BLOSSOM_RETURN_IF_ERROR(GetInt(json, "best_of", 1, kInt32Max, &best_of));
  if (best_of && *best_of != out.n) {
    // Ranking best_of candidates by their logprob is not done: best_of must be n.
    return FieldError("best_of", "only best_of equal to n is supported");
  }
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
  BLOSSOM_RETURN_IF_ERROR(FillBatch(prompts, &out));
  return out;
}

absl::StatusOr<CompletionRequest> ParseChatRequest(absl::string_view body,
                                                   const ChatTemplate& chat_template) {
  BLOSSOM_ASSIGN_OR_RETURN(Json json, ParseJsonObject(body));
  CompletionRequest out;
  out.chat = true;
  auto messages = json.find("messages");
  if (messages == json.end() || messages->is_null()) return FieldError("messages", "is required");
  // vLLM's rendering options: no generation prompt, or the last (assistant) message continued.
  absl::optional<bool> add_generation_prompt, continue_final_message;
  BLOSSOM_RETURN_IF_ERROR(GetBool(json, "add_generation_prompt", &add_generation_prompt));
  BLOSSOM_RETURN_IF_ERROR(GetBool(json, "continue_final_message", &continue_final_message));
  ChatRenderOptions render;
  render.continue_final_message = continue_final_message.value_or(false);
  render.add_generation_prompt = add_generation_prompt.value_or(!render.continue_final_message);
  if (render.add_generation_prompt && render.continue_final_message) {
    return FieldError("continue_final_message",
                      "cannot be true together with add_generation_prompt (vLLM's rule)");
  }
  BLOSSOM_ASSIGN_OR_RETURN(std::string prompt,
                           RenderChatPrompt(*messages, chat_template, render));
  out.request.set_text(std::move(prompt));
  BLOSSOM_RETURN_IF_ERROR(ParseCommon(json, &out));
  absl::optional<bool> logprobs;
  absl::optional<int64_t> top_logprobs;
  BLOSSOM_RETURN_IF_ERROR(GetBool(json, "logprobs", &logprobs));
  BLOSSOM_RETURN_IF_ERROR(GetInt(json, "top_logprobs", 0, kMaxLogprobs, &top_logprobs));
  if (top_logprobs && *top_logprobs > 0 && !logprobs.value_or(false)) {  // 0: vLLM's default
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
  std::vector<GenerateRequest> prompts = {out.request};
  BLOSSOM_RETURN_IF_ERROR(FillBatch(prompts, &out));
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

namespace {

// Choice `index`: `response` answering `sent` (the generation of that choice).
Json ChoiceJson(const CompletionRequest& request, const GenerateRequest& sent,
                const blossom::v1::GenerateResponse& response, int index) {
  const char* finish = FinishReasonString(response.final().finish_reason());
  absl::optional<int32_t> last_token;
  if (response.tokens_size() > 0) last_token = response.tokens(response.tokens_size() - 1).id();
  if (request.chat) {
    Json logprobs = nullptr;
    if (request.logprobs) {
      Json content = Json::array();
      for (const Token& t : response.tokens()) content.push_back(ChatTokenLogprob(t));
      logprobs = {{"content", content}};
    }
    return {{"index", index},
            {"message", {{"role", "assistant"}, {"content", response.text()}}},
            {"logprobs", logprobs},
            {"finish_reason", finish},
            {"stop_reason", StopReason(response.final(), last_token)}};
  }
  Json logprobs = nullptr;
  std::string prompt_text;
  if (request.echo) {
    if (sent.has_text()) {
      prompt_text = sent.text();
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
      offset += Characters(t.text());
    }
    for (const Token& t : response.tokens()) {
      if (request.prompt_only) break;
      tokens.push_back(t.text());
      token_logprobs.push_back(t.has_logprob() ? Json(t.logprob()) : Json(nullptr));
      top.push_back(TopLogprobsMap(t));
      offsets.push_back(offset);
      offset += Characters(t.text());
    }
    logprobs = {{"tokens", tokens},
                {"token_logprobs", token_logprobs},
                {"top_logprobs", top},
                {"text_offset", offsets}};
  }
  return {{"index", index},
          {"text", request.prompt_only ? prompt_text : prompt_text + response.text()},
          {"logprobs", logprobs},
          {"finish_reason", request.prompt_only ? "length" : finish},
          {"stop_reason", request.prompt_only ? Json(nullptr)
                                              : StopReason(response.final(), last_token)}};
}

Json ResponseJson(const CompletionRequest& request, Json choices,
                  const blossom::v1::Usage& usage, const std::string& fingerprint,
                  const std::string& id, int64_t created) {
  return {{"id", id},
          {"object", request.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", request.model},
          {"system_fingerprint", fingerprint},
          {"choices", std::move(choices)},
          {"usage", UsageJson(usage)}};
}

}  // namespace

Json CompletionResponse(const CompletionRequest& request,
                        const blossom::v1::GenerateResponse& response, const std::string& id,
                        int64_t created) {
  blossom::v1::Usage usage = response.final().usage();
  if (request.prompt_only) usage.set_generated_tokens(0);  // the token made to score is not sent
  return ResponseJson(request, Json::array({ChoiceJson(request, request.request, response, 0)}),
                      usage, response.final().system_fingerprint(), id, created);
}

Json CompletionResponse(const CompletionRequest& request,
                        const std::vector<blossom::v1::GenerateResponse>& responses,
                        const std::string& id, int64_t created) {
  Json choices = Json::array();
  blossom::v1::Usage usage;
  for (size_t k = 0; k < responses.size() && k < request.batch.size(); ++k) {
    const blossom::v1::Usage& one = responses[k].final().usage();
    choices.push_back(ChoiceJson(request, request.batch[k], responses[k], static_cast<int>(k)));
    if (k % static_cast<size_t>(request.n) == 0) {  // each prompt once
      usage.set_prompt_tokens(usage.prompt_tokens() + one.prompt_tokens());
      usage.set_cached_prompt_tokens(usage.cached_prompt_tokens() + one.cached_prompt_tokens());
    }
    if (!request.prompt_only) {
      usage.set_generated_tokens(usage.generated_tokens() + one.generated_tokens());
    }
  }
  const std::string fingerprint =
      responses.empty() ? "" : responses.front().final().system_fingerprint();
  return ResponseJson(request, std::move(choices), usage, fingerprint, id, created);
}

StreamEncoder::StreamEncoder(const CompletionRequest& request, std::string id, int64_t created)
    : request_(request),
      id_(std::move(id)),
      created_(created),
      choices_(request.batch.empty() ? 1 : static_cast<int>(request.batch.size())),
      text_offset_(static_cast<size_t>(choices_), 0),
      last_token_(static_cast<size_t>(choices_)) {}

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

Json StreamEncoder::LogprobsFor(const Token& token, int choice) {
  if (request_.chat) return {{"content", Json::array({ChatTokenLogprob(token)})}};
  size_t& offset = text_offset_[static_cast<size_t>(choice)];
  Json out = {{"tokens", Json::array({token.text()})},
              {"token_logprobs", Json::array({token.has_logprob() ? Json(token.logprob()) : Json(nullptr)})},
              {"top_logprobs", Json::array({TopLogprobsMap(token)})},
              {"text_offset", Json::array({offset})}};
  offset += Characters(token.text());
  return out;
}

std::string StreamEncoder::Start() {
  if (!request_.chat) return "";
  std::string events;
  for (int k = 0; k < choices_; ++k) {
    events += Event(Chunk({{"index", k},
                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                           {"logprobs", nullptr},
                           {"finish_reason", nullptr}}));
  }
  return events;
}

std::string StreamEncoder::OnMessage(const blossom::v1::GenerateStreamResponse& message,
                                     int choice) {
  if (choice < 0 || choice >= choices_) return "";
  const bool final = message.has_final();
  if (final) system_fingerprint_ = message.final().system_fingerprint();
  if (message.has_token()) last_token_[static_cast<size_t>(choice)] = message.token().id();
  const bool with_logprobs = request_.logprobs && message.has_token();
  std::string events;
  if (!message.text_delta().empty() || with_logprobs || final) {
    Json entry = {{"index", choice},
                  {"logprobs", with_logprobs ? LogprobsFor(message.token(), choice) : Json(nullptr)},
                  {"finish_reason",
                   final ? Json(FinishReasonString(message.final().finish_reason())) : Json(nullptr)}};
    if (final) {
      entry["stop_reason"] = StopReason(message.final(), last_token_[static_cast<size_t>(choice)]);
    }
    if (request_.chat) {
      entry["delta"] = message.text_delta().empty() && final ? Json::object()
                                                              : Json{{"content", message.text_delta()}};
    } else {
      entry["text"] = message.text_delta();
    }
    events += Event(Chunk(entry));
  }
  if (final) {
    const blossom::v1::Usage& one = message.final().usage();
    if (choice % request_.n == 0) {  // each prompt once
      usage_.set_prompt_tokens(usage_.prompt_tokens() + one.prompt_tokens());
      usage_.set_cached_prompt_tokens(usage_.cached_prompt_tokens() + one.cached_prompt_tokens());
    }
    usage_.set_generated_tokens(usage_.generated_tokens() + one.generated_tokens());
    if (++finals_ == choices_) {
      if (request_.include_usage) {
        Json usage = Chunk(nullptr);
        usage["usage"] = UsageJson(usage_);
        events += Event(usage);
      }
      events += "data: [DONE]\n\n";
    }
  }
  return events;
}

std::string StreamEncoder::Error(int http_status, absl::string_view message) {
  return absl::StrCat("data: ", OpenAIErrorJson(http_status, message, ""), "\n\ndata: [DONE]\n\n");
}

}  // namespace blossom::gateway::openai
