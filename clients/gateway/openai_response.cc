// The response side of openai_api.h: whole responses and SSE chunks in OpenAI's (and vLLM's)
// shapes, from the server's GenerateResponse / GenerateStreamResponse messages.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/best_of.h"
#include "clients/gateway/openai_api.h"
#include "engine/text/utf8.h"

namespace blossom::gateway::openai {
namespace {

using blossom::v1::FinishReason;
using blossom::v1::GenerateRequest;
using blossom::v1::Token;

// A logprob as OpenAI and vLLM send it: at least -9999.0, their mark of a token the model all
// but rules out (the server clamps -inf to the lowest float, which no client expects).
double ApiLogprob(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

OrderedJson LogprobOrNull(const Token& token) {
  return token.has_logprob() ? OrderedJson(ApiLogprob(token.logprob())) : OrderedJson(nullptr);
}

// OpenAI's "up to logprobs+1 elements" in vLLM's order: the token itself first, then its first
// `limit` alternatives (a prompt token may carry more, for prompt_logprobs), most likely first
// as the server ranks them; so `logprobs: 0` is {token: logprob}, and clients may look the
// chosen token up in its entry. Keyed by text the way vLLM's Python dict is: a text seen again
// (the token among its own alternatives, or two tokens that decode alike, such as byte tokens
// shown as U+FFFD) keeps its first place and takes the later value. OrderedJson: Json would
// sort the keys alphabetically.
OrderedJson TopLogprobsMap(const Token& token, int limit) {
  OrderedJson top = OrderedJson::object();
  top[token.text()] = ApiLogprob(token.logprob());
  for (const auto& t : token.top_logprobs()) {
    if (limit-- <= 0) break;
    top[t.token()] = ApiLogprob(t.logprob());
  }
  return top;
}

// vLLM's prompt_logprobs: null for the first prompt token (nothing precedes it), then one object
// per token keyed by token id: the token itself and its `n` most likely alternatives, each
// {logprob, rank, decoded_token}; the alternatives rank 1 to n, the token its own rank unless
// it is one of them.
OrderedJson PromptLogprobsJson(const google::protobuf::RepeatedPtrField<Token>& tokens, int n) {
  OrderedJson out = OrderedJson::array();
  for (const Token& t : tokens) {
    if (!t.has_logprob()) {
      out.push_back(nullptr);
      continue;
    }
    // The token first, then its alternatives by rank, as vLLM builds its dict: a token among
    // them keeps its first place and takes that entry (its rank in the list).
    OrderedJson entry = OrderedJson::object();
    entry[std::to_string(t.id())] = {
        {"logprob", ApiLogprob(t.logprob())},
        {"rank", t.has_rank() ? OrderedJson(t.rank()) : OrderedJson(nullptr)},
        {"decoded_token", t.text()}};
    int rank = 0;
    for (const auto& alt : t.top_logprobs()) {
      if (++rank > n) break;
      entry[std::to_string(alt.token_id())] = {{"logprob", ApiLogprob(alt.logprob())},
                                               {"rank", rank},
                                               {"decoded_token", alt.token()}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

// OpenAI's logprob `bytes`: the token's raw bytes (a byte-level BPE token may be part of a UTF-8
// character, which `text` renders lossily). A server predating token_bytes sends none: then
// the text's bytes, the best left.
OrderedJson Bytes(const std::string& raw, const std::string& text) {
  OrderedJson bytes = OrderedJson::array();
  for (unsigned char c : raw.empty() ? text : raw) bytes.push_back(static_cast<int>(c));
  return bytes;
}

OrderedJson ChatTokenLogprob(const Token& token) {
  OrderedJson top = OrderedJson::array();
  for (const auto& t : token.top_logprobs()) {
    top.push_back({{"token", t.token()},
                   {"logprob", ApiLogprob(t.logprob())},
                   {"bytes", Bytes(t.token_bytes(), t.token())}});
  }
  return {{"token", token.text()},
          {"logprob", LogprobOrNull(token)},
          {"bytes", Bytes(token.token_bytes(), token.text())},
          {"top_logprobs", top}};
}

// vLLM's stop_reason: the stop string that ended the text, or the id of the stop token (from
// stop_token_ids); null for EOS, the length limit and the rest.
OrderedJson StopReason(const blossom::v1::FinalInfo& final, absl::optional<int32_t> last_token) {
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

// OpenAI completion logprobs: four parallel lists.
OrderedJson EmptyCompletionLogprobs() {
  return {{"tokens", OrderedJson::array()},
          {"token_logprobs", OrderedJson::array()},
          {"top_logprobs", OrderedJson::array()},
          {"text_offset", OrderedJson::array()}};
}

// Appends `t` at *offset characters (then advanced past it); a token without a logprob (the
// first echoed prompt token) has null there and in top_logprobs.
void AppendCompletionLogprob(const Token& t, int top_n, size_t* offset, OrderedJson* lists) {
  (*lists)["tokens"].push_back(t.text());
  (*lists)["token_logprobs"].push_back(LogprobOrNull(t));
  (*lists)["top_logprobs"].push_back(t.has_logprob() ? TopLogprobsMap(t, top_n)
                                                      : OrderedJson(nullptr));
  (*lists)["text_offset"].push_back(*offset);
  *offset += Characters(t.text());
}

// The echoed prompt's text: the request's, or for a token-id prompt the decode of its tokens
// (the server sends them as prompt logprobs), as vLLM's tokenizer.decode(prompt_token_ids):
// their bytes joined, then decoded once, so that a character split over byte tokens is itself,
// not one U+FFFD per token. A token without bytes (an older server) gives its text.
std::string EchoedPrompt(const GenerateRequest& sent,
                         const google::protobuf::RepeatedPtrField<Token>& prompt_tokens) {
  if (sent.has_text()) return sent.text();
  std::string bytes;
  for (const Token& t : prompt_tokens) {
    bytes += t.token_bytes().empty() ? t.text() : t.token_bytes();
  }
  return Utf8Lossy(bytes);
}

OrderedJson UsageJson(const blossom::v1::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens()},
          {"completion_tokens", usage.generated_tokens()},
          {"total_tokens", usage.prompt_tokens() + usage.generated_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens()}}}};
}

std::string Event(const OrderedJson& json) {
  return absl::StrCat("data: ", Dump(json), "\n\n");
}

}  // namespace

const char* FinishReasonString(FinishReason reason) {
  switch (reason) {
    case blossom::v1::FINISH_REASON_LENGTH: return "length";
    case blossom::v1::FINISH_REASON_EOS_TOKEN:
    case blossom::v1::FINISH_REASON_STOP_TOKEN:
    case blossom::v1::FINISH_REASON_STOP_STRING: return "stop";
    // OpenAI clients know only "stop" and "length" here (vLLM's "abort" is not OpenAI's): output
    // cut short by a cancellation, an error or the server's shutdown is "length", i.e. not a
    // natural end. (Such calls end with an error status, so no final message normally comes.)
    case blossom::v1::FINISH_REASON_CANCELLED:
    case blossom::v1::FINISH_REASON_ERROR:
    case blossom::v1::FINISH_REASON_ABORTED: return "length";
    default: return "stop";
  }
}

namespace {

// Choice `index`: `response` answering `sent` (the generation of that choice).
OrderedJson ChoiceJson(const CompletionRequest& request, const GenerateRequest& sent,
                       const blossom::v1::GenerateResponse& response, int index) {
  const char* finish = FinishReasonString(response.final().finish_reason());
  absl::optional<int32_t> last_token;
  if (response.tokens_size() > 0) last_token = response.tokens(response.tokens_size() - 1).id();
  if (request.chat) {
    OrderedJson logprobs = nullptr;
    if (request.logprobs) {
      OrderedJson content = OrderedJson::array();
      for (const Token& t : response.tokens()) content.push_back(ChatTokenLogprob(t));
      logprobs = {{"content", content}};
    }
    OrderedJson message = {{"role", "assistant"}, {"content", request.chat_echo + response.text()}};
    std::string finish_reason = finish;
    if (request.tool_choice.mode != ToolChoice::Mode::kNone) {
      // A whole call is answered as tool_calls (content null, as OpenAI); a call cut short
      // stays text, with finish_reason "length".
      if (absl::optional<Json> calls =
              ToolCallsJson(request.tool_choice, response.text(), sent.request_id())) {
        message["content"] = nullptr;
        message["tool_calls"] = *std::move(calls);
        if (request.tool_choice.mode == ToolChoice::Mode::kRequired && finish_reason == "stop") {
          finish_reason = "tool_calls";
        }
      }
    }
    return {{"index", index},
            {"message", std::move(message)},
            {"logprobs", logprobs},
            {"finish_reason", finish_reason},
            {"stop_reason", StopReason(response.final(), last_token)}};
  }
  OrderedJson logprobs = nullptr;
  const std::string prompt_text =
      request.echo ? EchoedPrompt(sent, response.prompt_logprobs()) : std::string();
  if (request.logprobs) {
    logprobs = EmptyCompletionLogprobs();
    size_t offset = 0;
    // Echoed prompt tokens first; the first has no logprob and no alternatives (null). Without
    // echo they were scored for prompt_logprobs only.
    if (request.echo) {
      for (const Token& t : response.prompt_logprobs()) {
        AppendCompletionLogprob(t, request.top_logprobs, &offset, &logprobs);
      }
    }
    if (!request.prompt_only) {
      for (const Token& t : response.tokens()) {
        AppendCompletionLogprob(t, request.top_logprobs, &offset, &logprobs);
      }
    }
  }
  OrderedJson choice = {
      {"index", index},
      {"text", request.prompt_only ? prompt_text : prompt_text + response.text()},
      {"logprobs", logprobs},
      {"finish_reason", request.prompt_only ? "length" : finish},
      {"stop_reason", request.prompt_only ? OrderedJson(nullptr)
                                          : StopReason(response.final(), last_token)}};
  if (request.prompt_logprobs >= 0) {
    choice["prompt_logprobs"] =
        PromptLogprobsJson(response.prompt_logprobs(), request.prompt_logprobs);
  }
  return choice;
}

// `first`: the first choice's response (null when there is none); chat's prompt_logprobs are
// the response's, not a choice's (vLLM), and every choice has the same prompt.
OrderedJson ResponseJson(const CompletionRequest& request, OrderedJson choices,
                         const blossom::v1::GenerateResponse* first,
                         const blossom::v1::Usage& usage, const std::string& id,
                         int64_t created) {
  OrderedJson response = {
      {"id", id},
      {"object", request.chat ? "chat.completion" : "text_completion"},
      {"created", created},
      {"model", request.model},
      {"system_fingerprint", first ? first->final().system_fingerprint() : ""},
      {"choices", std::move(choices)},
      {"usage", UsageJson(usage)}};
  if (request.chat && request.prompt_logprobs >= 0 && first != nullptr) {
    response["prompt_logprobs"] =
        PromptLogprobsJson(first->prompt_logprobs(), request.prompt_logprobs);
  }
  return response;
}

}  // namespace

OrderedJson CompletionResponse(const CompletionRequest& request,
                               const blossom::v1::GenerateResponse& response,
                               const std::string& id, int64_t created) {
  blossom::v1::Usage usage = response.final().usage();
  if (request.prompt_only) usage.set_generated_tokens(0);  // the token made to score is not sent
  return ResponseJson(request,
                      OrderedJson::array({ChoiceJson(request, request.request, response, 0)}),
                      &response, usage, id, created);
}

OrderedJson CompletionResponse(const CompletionRequest& request,
                               const std::vector<blossom::v1::GenerateResponse>& responses,
                               const std::string& id, int64_t created) {
  if (request.best_of > request.n) {
    // The n best candidates of each prompt, best first, answered as an ordinary batch.
    CompletionRequest shown = request;
    shown.batch.clear();
    std::vector<blossom::v1::GenerateResponse> chosen;
    const size_t per_prompt = static_cast<size_t>(request.best_of);
    for (size_t begin = 0; begin + per_prompt <= responses.size(); begin += per_prompt) {
      const std::vector<size_t> ranked = RankByMeanLogprob(responses, begin, per_prompt);
      for (size_t i = 0; i < static_cast<size_t>(request.n); ++i) {
        shown.batch.push_back(request.batch[ranked[i]]);
        chosen.push_back(responses[ranked[i]]);
      }
      // Chat asks only the prompt's first candidate for its prompt logprobs (the same for every
      // candidate), and answers them from the first choice shown.
      blossom::v1::GenerateResponse& first_shown = chosen[chosen.size() - request.n];
      if (request.chat && first_shown.prompt_logprobs().empty()) {
        *first_shown.mutable_prompt_logprobs() = responses[begin].prompt_logprobs();
      }
    }
    shown.best_of = shown.n;
    return CompletionResponse(shown, chosen, id, created);
  }
  OrderedJson choices = OrderedJson::array();
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
  return ResponseJson(request, std::move(choices), responses.empty() ? nullptr : &responses.front(),
                      usage, id, created);
}

StreamEncoder::StreamEncoder(const CompletionRequest& request, std::string id, int64_t created)
    : request_(request),
      id_(std::move(id)),
      created_(created),
      choices_(request.batch.empty() ? 1 : static_cast<int>(request.batch.size())),
      text_offset_(static_cast<size_t>(choices_), 0),
      echoed_(static_cast<size_t>(choices_), false),
      last_token_(static_cast<size_t>(choices_)),
      call_started_(static_cast<size_t>(choices_), false),
      call_text_(static_cast<size_t>(choices_)),
      prompt_tokens_(static_cast<size_t>(choices_), 0),
      completion_tokens_(static_cast<size_t>(choices_), 0) {}

void StreamEncoder::SetPromptTokens(int choice, int32_t tokens) {
  if (choice < 0 || choice >= choices_) return;
  const size_t k = static_cast<size_t>(choice);
  // The server keeps the prompt's last truncate_prompt_tokens tokens, and counts those.
  const int32_t keep =
      (request_.batch.empty() ? request_.request : request_.batch[k]).truncate_prompt_tokens();
  prompt_tokens_[k] = keep > 0 ? std::min(tokens, keep) : tokens;
}

OrderedJson StreamEncoder::Chunk(OrderedJson entry, int choice) const {
  OrderedJson chunk = {
      {"id", id_},
      {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
      {"created", created_},
      {"model", request_.model}};
  // Known from the server's final message on (OpenAI's place for it: after "model").
  if (!system_fingerprint_.empty()) chunk["system_fingerprint"] = system_fingerprint_;
  chunk["choices"] = entry.is_null() ? OrderedJson::array() : OrderedJson::array({entry});
  // OpenAI: with include_usage every chunk has "usage", null until the last one's totals.
  if (request_.include_usage) chunk["usage"] = nullptr;
  if (request_.continuous_usage && choice >= 0) {
    // vLLM's continuous_usage_stats: the choice's own counts so far (not the request's sum).
    const int32_t prompt = prompt_tokens_[static_cast<size_t>(choice)];
    const int32_t completion = completion_tokens_[static_cast<size_t>(choice)];
    chunk["usage"] = {{"prompt_tokens", prompt},
                      {"completion_tokens", completion},
                      {"total_tokens", prompt + completion}};
  }
  return chunk;
}

OrderedJson StreamEncoder::LogprobsFor(const Token& token, int choice) {
  if (request_.chat) return {{"content", OrderedJson::array({ChatTokenLogprob(token)})}};
  OrderedJson out = EmptyCompletionLogprobs();
  AppendCompletionLogprob(token, request_.top_logprobs, &text_offset_[static_cast<size_t>(choice)],
                          &out);
  return out;
}

OrderedJson StreamEncoder::ToolCallDelta(int choice, const std::string& text, bool final,
                                         std::string* finish) {
  const size_t k = static_cast<size_t>(choice);
  const GenerateRequest& sent = request_.batch.empty() ? request_.request : request_.batch[k];
  if (request_.tool_choice.mode == ToolChoice::Mode::kNamed) {
    // vLLM's and OpenAI's stream: the call's id, type and name first, then argument pieces.
    if (text.empty()) return OrderedJson::object();
    OrderedJson call = {{"index", 0}, {"function", {{"arguments", text}}}};
    if (!call_started_[k]) {
      call_started_[k] = true;
      call["id"] = absl::StrCat("call_", sent.request_id(), "_0");
      call["type"] = "function";
      call["function"]["name"] = request_.tool_choice.function;
    }
    return {{"tool_calls", OrderedJson::array({call})}};
  }
  // "required": the list is sent once whole, when the choice ends.
  call_text_[k] += text;
  if (!final) return OrderedJson::object();
  absl::optional<Json> calls =
      ToolCallsJson(request_.tool_choice, call_text_[k], sent.request_id());
  if (!calls) return {{"content", call_text_[k]}};
  for (size_t i = 0; i < calls->size(); ++i) (*calls)[i]["index"] = static_cast<int>(i);
  if (*finish == "stop") *finish = "tool_calls";
  return {{"tool_calls", *calls}};
}

std::string StreamEncoder::Start() {
  if (!request_.chat) return "";
  std::string events;
  for (int k = 0; k < choices_; ++k) {
    events += Event(Chunk({{"index", k},
                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                           {"logprobs", nullptr},
                           {"finish_reason", nullptr}},
                          k));
    if (!request_.chat_echo.empty()) {
      events += Event(Chunk({{"index", k},
                             {"delta", {{"content", request_.chat_echo}}},
                             {"logprobs", nullptr},
                             {"finish_reason", nullptr}},
                            k));
    }
  }
  return events;
}

std::string StreamEncoder::OnMessage(const blossom::v1::GenerateStreamResponse& message,
                                     int choice) {
  if (choice < 0 || choice >= choices_) return "";
  const size_t k = static_cast<size_t>(choice);
  const bool final = message.has_final();
  if (final) system_fingerprint_ = message.final().system_fingerprint();
  if (message.has_token()) last_token_[k] = message.token().id();
  // Counted as sent; the final message's usage is the server's own count.
  if (message.has_token() && !request_.prompt_only) ++completion_tokens_[k];
  if (final) {
    prompt_tokens_[k] = message.final().usage().prompt_tokens();
    completion_tokens_[k] = request_.prompt_only ? 0 : message.final().usage().generated_tokens();
  }
  // echo (completions): the prompt's text and logprobs lead the choice's first chunk; with
  // max_tokens 0 they are all it sends (the token generated to score it is left out).
  std::string text = request_.prompt_only ? "" : message.text_delta();
  OrderedJson logprobs = nullptr;
  if (request_.logprobs && (message.has_token() || request_.echo)) {
    logprobs = EmptyCompletionLogprobs();
  }
  if (request_.echo && !echoed_[k]) {
    echoed_[k] = true;
    const GenerateRequest& sent = request_.batch.empty() ? request_.request : request_.batch[k];
    text = EchoedPrompt(sent, message.prompt_logprobs()) + text;
    if (request_.logprobs) {
      for (const Token& t : message.prompt_logprobs()) {
        AppendCompletionLogprob(t, request_.top_logprobs, &text_offset_[k], &logprobs);
      }
    }
  }
  if (request_.logprobs && message.has_token() && !request_.prompt_only) {
    if (request_.chat) {
      logprobs = LogprobsFor(message.token(), choice);
    } else {
      AppendCompletionLogprob(message.token(), request_.top_logprobs, &text_offset_[k], &logprobs);
    }
  }
  const bool with_logprobs =
      !logprobs.is_null() && !logprobs.value("tokens", OrderedJson::array()).empty();
  std::string events;
  const bool calls = request_.chat && request_.tool_choice.mode != ToolChoice::Mode::kNone;
  if (calls && request_.tool_choice.mode == ToolChoice::Mode::kRequired && !final &&
      logprobs.is_null()) {
    call_text_[k] += text;  // held until the list is whole
    return events;
  }
  if (!text.empty() || (request_.chat && !logprobs.is_null()) || with_logprobs || final) {
    std::string finish = !final ? ""
                         : request_.prompt_only
                             ? "length"
                             : FinishReasonString(message.final().finish_reason());
    // OpenAI's field order: the index, the delta (chat) or text, then the rest.
    OrderedJson entry = {{"index", choice}};
    if (calls) {
      entry["delta"] = ToolCallDelta(choice, text, final, &finish);
    } else if (request_.chat) {
      entry["delta"] =
          text.empty() && final ? OrderedJson::object() : OrderedJson{{"content", text}};
    } else {
      entry["text"] = text;
    }
    entry["logprobs"] = request_.chat || with_logprobs ? logprobs : OrderedJson(nullptr);
    entry["finish_reason"] = final ? OrderedJson(finish) : OrderedJson(nullptr);
    if (final) {
      entry["stop_reason"] = request_.prompt_only ? OrderedJson(nullptr)
                                                  : StopReason(message.final(), last_token_[k]);
    }
    events += Event(Chunk(std::move(entry), choice));
  }
  if (final) {
    const blossom::v1::Usage& one = message.final().usage();
    if (choice % request_.n == 0) {  // each prompt once
      usage_.set_prompt_tokens(usage_.prompt_tokens() + one.prompt_tokens());
      usage_.set_cached_prompt_tokens(usage_.cached_prompt_tokens() + one.cached_prompt_tokens());
    }
    if (!request_.prompt_only) {  // the token made to score the prompt is not sent
      usage_.set_generated_tokens(usage_.generated_tokens() + one.generated_tokens());
    }
    if (++finals_ == choices_) {
      if (request_.include_usage) {
        OrderedJson usage = Chunk(nullptr, -1);
        usage["usage"] = UsageJson(usage_);
        events += Event(usage);
      }
      events += "data: [DONE]\n\n";
    }
  }
  return events;
}

std::string StreamEncoder::Error(absl::string_view error_json) {
  return absl::StrCat("data: ", error_json, "\n\ndata: [DONE]\n\n");
}

}  // namespace blossom::gateway::openai
