#include "clients/gateway/openai_api.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/beam_search.h"
#include "clients/gateway/structured_outputs.h"
#include "kernels/status_macros.h"
#include "server/status_details.h"

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

constexpr size_t kMaxLogitBiasTokens = 300;  // OpenAI's limit
constexpr size_t kMaxBadWords = 64;          // the server's

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100]}; {} is none.
absl::Status ParseLogitBias(const Json& body, blossom::v1::SamplingParameters* sampling) {
  auto bias = body.find("logit_bias");
  if (bias == body.end() || bias->is_null()) return absl::OkStatus();
  if (!bias->is_object()) {
    return FieldError("logit_bias", "must be an object mapping token ids to biases");
  }
  if (bias->size() > kMaxLogitBiasTokens) {
    return FieldError("logit_bias", absl::StrCat("at most ", kMaxLogitBiasTokens, " tokens"));
  }
  for (const auto& [key, value] : bias->items()) {
    int64_t id = -1;
    if (!absl::SimpleAtoi(key, &id) || id < 0 || id > kInt32Max) {
      return FieldError("logit_bias", "keys must be token ids (non-negative integers)");
    }
    if (!value.is_number()) return FieldError("logit_bias", "values must be numbers");
    const double v = value.get<double>();
    if (!(v >= -100.0 && v <= 100.0)) {
      return FieldError("logit_bias", absl::StrCat("values must be in [-100, 100], got ", v,
                                                   " for token ", id));
    }
    (*sampling->mutable_logit_bias())[static_cast<int32_t>(id)] = static_cast<float>(v);
  }
  return absl::OkStatus();
}

// Fields shared by both endpoints.
absl::Status ParseCommon(const Json& body, absl::string_view raw_body, CompletionRequest* out) {
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
  if (out->chat) {
    // OpenAI's current name for the limit (max_tokens is deprecated there): it wins when both
    // are given, as vLLM's `max_completion_tokens or max_tokens`.
    absl::optional<int64_t> max_completion_tokens;
    BLOSSOM_RETURN_IF_ERROR(
        GetInt(body, "max_completion_tokens", 1, kInt32Max, &max_completion_tokens));
    if (max_completion_tokens) max_tokens = max_completion_tokens;
  }
  if (max_tokens && *max_tokens == 0) {
    out->prompt_only = true;
    max_tokens = 1;
  }
  auto max_tokens_field = body.find("max_tokens");
  const bool max_tokens_null = max_tokens_field != body.end() && max_tokens_field->is_null();
  if (max_tokens) {
    stopping->set_max_new_tokens(static_cast<int32_t>(*max_tokens));
  } else if (out->chat || max_tokens_null) {
    // OpenAI (and vLLM) chat without a limit generate up to the context length. Completions
    // keep OpenAI's default of 16 (the server's) only when max_tokens is absent: vLLM's field
    // defaults to 16, and an explicit null is None there, which means the context limit.
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
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "truncate_prompt_tokens", -kInt32Max, kInt32Max, &truncate));
  if (truncate && *truncate == -1) {
    // vLLM reads -1 as "to the model's length"; here the count is the client's to give.
    return Unsupported("truncate_prompt_tokens",
                       "truncate_prompt_tokens -1 (to the model's length; give the number of "
                       "prompt tokens to keep, at most max_model_len - 1 from /v1/models)");
  }
  if (truncate && *truncate < 1) {
    return FieldError("truncate_prompt_tokens", absl::StrCat("must be at least 1, got ", *truncate));
  }
  if (truncate) req.set_truncate_prompt_tokens(static_cast<int32_t>(*truncate));
  absl::optional<int64_t> priority;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "priority", -kInt32Max, kInt32Max, &priority));
  if (priority) out->request.set_priority(static_cast<int32_t>(*priority));

  std::vector<std::string> stop;
  BLOSSOM_RETURN_IF_ERROR(GetStringList(body, "stop", kMaxOpenAIStopSequences, &stop));
  for (std::string& s : stop) stopping->add_stop(std::move(s));
  std::vector<int32_t> ids;
  BLOSSOM_RETURN_IF_ERROR(GetTokenIds(body, "stop_token_ids", kMaxTokenIdList, &ids));
  stopping->mutable_stop_token_ids()->Add(ids.begin(), ids.end());
  // vLLM's allowed_token_ids and bad_words, OpenAI's logit_bias: the server checks the ids
  // against the vocabulary and tokenizes the words.
  BLOSSOM_RETURN_IF_ERROR(GetTokenIds(body, "allowed_token_ids", kMaxTokenIdList, &ids));
  sampling->mutable_allowed_token_ids()->Add(ids.begin(), ids.end());
  auto allowed = body.find("allowed_token_ids");
  if (allowed != body.end() && allowed->is_array() && allowed->empty()) {
    return FieldError("allowed_token_ids", "must not be empty (leave it out to allow every token)");
  }
  std::vector<std::string> bad_words;
  if (auto it = body.find("bad_words"); it != body.end() && it->is_string()) {
    return FieldError("bad_words", "must be a list of strings");  // vLLM's list[str]
  }
  BLOSSOM_RETURN_IF_ERROR(GetStringList(body, "bad_words", kMaxBadWords, &bad_words));
  for (std::string& word : bad_words) sampling->add_bad_words(std::move(word));
  BLOSSOM_RETURN_IF_ERROR(ParseLogitBias(body, sampling));
  BLOSSOM_RETURN_IF_ERROR(ParseStructuredOutputs(body, raw_body, sampling, &out->constraint_param));

  absl::optional<bool> stream;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "stream", &stream));
  out->stream = stream.value_or(false);
  // OpenAI completions' best_of (vLLM takes it on chat too): best_of candidates per prompt, the
  // n with the highest log probability per token returned (the same rule as TGI's best_of).
  absl::optional<int64_t> best_of;
  BLOSSOM_RETURN_IF_ERROR(GetInt(body, "best_of", 1, kMaxChoices, &best_of));
  if (best_of) {
    if (*best_of < out->n) return FieldError("best_of", "must be at least n");
    out->best_of = static_cast<int>(*best_of);
    if (out->best_of > out->n && out->stream) {
      return FieldError("best_of", "above n is not supported with stream (OpenAI's rule)");
    }
  }
  // vLLM's prompt_logprobs: each prompt token's logprob, rank and top alternatives. vLLM's -1
  // (the whole vocabulary: 250,880 entries a token for BLOOM) is refused like any value above
  // the limit; streams cannot carry them (vLLM's rule; 0 is accepted there and sends nothing).
  auto prompt_logprobs = body.find("prompt_logprobs");
  if (prompt_logprobs != body.end() && !prompt_logprobs->is_null()) {
    if (!prompt_logprobs->is_number_integer()) {
      return FieldError("prompt_logprobs", "must be an integer");
    }
    const int64_t value = prompt_logprobs->get<int64_t>();
    if (value < 0 || value > kMaxLogprobs) {
      return FieldError("prompt_logprobs",
                        absl::StrCat("must be in [0, ", kMaxLogprobs,
                                     "] (-1, the whole vocabulary, is not supported)"));
    }
    if (out->stream && value > 0) {
      return FieldError("prompt_logprobs", "are not available when stream=true (vLLM's rule)");
    }
    if (!out->stream) out->prompt_logprobs = static_cast<int>(value);
  }
  auto options = body.find("stream_options");
  if (options != body.end() && !options->is_null()) {
    if (!out->stream) return FieldError("stream_options", "is only allowed with stream=true");
    if (!options->is_object()) return FieldError("stream_options", "must be an object");
    absl::optional<bool> include_usage, continuous_usage;
    if (!GetBool(*options, "include_usage", &include_usage).ok()) {
      return FieldError("stream_options.include_usage", "must be a boolean");
    }
    if (!GetBool(*options, "continuous_usage_stats", &continuous_usage).ok()) {
      return FieldError("stream_options.continuous_usage_stats", "must be a boolean");
    }
    out->include_usage = include_usage.value_or(false);
    // vLLM's: usage on every chunk, only along with include_usage (alone it does nothing there).
    out->continuous_usage = out->include_usage && continuous_usage.value_or(false);
  }
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
  const int per_prompt = std::max(out->n, out->best_of);
  const int64_t choices = static_cast<int64_t>(prompts.size()) * per_prompt;
  if (choices > kMaxChoices) {
    return FieldError(out->best_of > out->n ? "best_of" : "n",
                      absl::StrCat("prompts x ", out->best_of > out->n ? "best_of" : "n",
                                   " must be at most ", kMaxChoices, ", got ", choices));
  }
  if (choices == 1) return absl::OkStatus();
  for (const GenerateRequest& prompt : prompts) {
    for (int i = 0; i < per_prompt; ++i) {
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
  // Queued together: the server refuses for good a group its queue could never hold.
  for (GenerateRequest& one : out->batch) one.set_group_size(static_cast<int32_t>(choices));
  return absl::OkStatus();
}

// Asks the server for what prompt_logprobs and the echo need: the larger top count of the two.
void RequestPromptLogprobs(CompletionRequest* out) {
  if (out->prompt_logprobs < 0) return;
  auto* sampling = out->request.mutable_sampling();
  sampling->set_prompt_logprobs(sampling->has_prompt_logprobs()
                                    ? std::max(sampling->prompt_logprobs(), out->prompt_logprobs)
                                    : out->prompt_logprobs);
}

// best_of > n ranks the candidates by their tokens' logprobs: the server must send them (the
// response shows them only if the client asked).
void AskLogprobsToRank(CompletionRequest* out) {
  if (out->best_of > out->n && !out->request.sampling().has_logprobs()) {
    out->request.mutable_sampling()->set_logprobs(0);
  }
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body) {
  BLOSSOM_ASSIGN_OR_RETURN(Json json, ParseJsonObject(body));
  CompletionRequest out;
  out.chat = false;
  std::vector<GenerateRequest> prompts;
  BLOSSOM_RETURN_IF_ERROR(ParsePrompts(json, &prompts));
  out.request = prompts.front();
  BLOSSOM_RETURN_IF_ERROR(ParseCommon(json, body, &out));
  if (out.echo && out.request.truncate_prompt_tokens() > 0) {
    // The echo would show the whole prompt while the model saw its end only.
    return Unsupported("truncate_prompt_tokens", "truncate_prompt_tokens with echo");
  }
  absl::optional<int64_t> logprobs;
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
  RequestPromptLogprobs(&out);
  AskLogprobsToRank(&out);
  BLOSSOM_RETURN_IF_ERROR(FillBatch(prompts, &out));
  BLOSSOM_RETURN_IF_ERROR(ParseBeamSearch(json, &out));
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
  BLOSSOM_ASSIGN_OR_RETURN(ChatRenderOptions render, ParseChatRenderOptions(json));
  BLOSSOM_ASSIGN_OR_RETURN(ParsedTools tools, ParseTools(json, body));
  render.tools = std::move(tools.rendered);
  BLOSSOM_ASSIGN_OR_RETURN(std::string prompt,
                           RenderChatPrompt(*messages, chat_template, render));
  out.request.set_text(std::move(prompt));
  BLOSSOM_RETURN_IF_ERROR(ParseCommon(json, body, &out));
  absl::optional<bool> echo;
  BLOSSOM_RETURN_IF_ERROR(GetBool(json, "echo", &echo));
  // vLLM's rule: the answer's role is the assistant's after a generation prompt, else the last
  // message's own (which the answer continues), so the last message is echoed whatever its role.
  if (echo.value_or(false)) {
    out.chat_echo = EchoedLastMessage(*messages, render.add_generation_prompt ? "assistant" : "");
  }
  if (!tools.schema.empty()) {
    // The call is generated as JSON under the tools' schema: one constraint per request.
    auto* sampling = out.request.mutable_sampling();
    if (sampling->has_json_schema() || sampling->has_regex() || sampling->has_grammar() ||
        sampling->guided_choice_size() > 0) {
      return FieldError("tool_choice",
                        "a function call cannot be combined with response_format, guided_json, "
                        "guided_regex, guided_grammar, guided_choice or structured_outputs");
    }
    if (out.request.stopping().ignore_eos() || out.request.stopping().min_new_tokens() > 0) {
      return FieldError("tool_choice",
                        "a function call ends with EOS once whole: not with ignore_eos or min_tokens");
    }
    sampling->set_json_schema(tools.schema);
    out.tool_choice = tools.choice;
    out.constraint_param = tools.param;
  }
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
  RequestPromptLogprobs(&out);
  AskLogprobsToRank(&out);
  std::vector<GenerateRequest> prompts = {out.request};
  BLOSSOM_RETURN_IF_ERROR(FillBatch(prompts, &out));
  // Chat returns the prompt's logprobs once, from the first choice: the others need not pay
  // for them (a prompt-logprob prefill bypasses the prefix cache).
  for (size_t k = 1; k < out.batch.size(); ++k) out.batch[k].mutable_sampling()->clear_prompt_logprobs();
  BLOSSOM_RETURN_IF_ERROR(ParseBeamSearch(json, &out));
  return out;
}

absl::Status NameConstraintField(const CompletionRequest& request, absl::Status status) {
  const StatusDetails details = DetailsOf(status);
  if (request.constraint_param.empty() ||
      (details.field != "sampling.json_schema" && details.field != "sampling.regex" &&
       details.field != "sampling.grammar")) {
    return status;
  }
  std::string message(status.message());
  if (absl::StartsWith(message, details.field + ": ")) {
    message = absl::StrCat(request.constraint_param, message.substr(details.field.size()));
  }
  absl::Status renamed(status.code(), message);
  renamed = WithFieldViolation(std::move(renamed), request.constraint_param, message);
  return details.reason.empty() ? renamed : WithReason(std::move(renamed), details.reason);
}

}  // namespace blossom::gateway::openai
