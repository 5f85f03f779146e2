#include "clients/gateway/vllm_api.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/optional.h"
#include "kernels/status_macros.h"

namespace blossom::gateway::vllm {

bool IsTokenizeRequest(const Json& body) {
  return body.is_object() && (body.contains("prompt") || body.contains("messages")) &&
         !body.contains("inputs");
}

absl::StatusOr<TokenizeCall> ParseTokenizeRequest(const Json& body,
                                                  const ChatTemplate& chat_template) {
  TokenizeCall call;
  absl::optional<std::string> model;
  BLOSSOM_RETURN_IF_ERROR(GetString(body, "model", &model));  // checked by the server
  if (model) call.request.set_model(*model);
  absl::optional<bool> add_special, return_strs;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "add_special_tokens", &add_special));
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "return_token_strs", &return_strs));
  call.return_token_strs = return_strs.value_or(false);
  auto messages = body.find("messages");
  if (messages != body.end() && !messages->is_null()) {
    if (body.contains("prompt")) return FieldError("prompt", "give prompt or messages, not both");
    BLOSSOM_ASSIGN_OR_RETURN(ChatRenderOptions render, ParseChatRenderOptions(body));
    BLOSSOM_ASSIGN_OR_RETURN(std::string text,
                             RenderChatPrompt(*messages, chat_template, render));
    call.request.set_text(std::move(text));
    call.request.set_add_special_tokens(add_special.value_or(false));  // vLLM's chat default
    call.chat = true;
    return call;
  }
  absl::optional<std::string> prompt;
  BLOSSOM_RETURN_IF_ERROR(GetString(body, "prompt", &prompt));
  if (!prompt) return FieldError("prompt", "is required (or messages)");
  call.request.set_text(*prompt);
  call.request.set_add_special_tokens(add_special.value_or(true));
  return call;
}

Json TokenizeResponse(const TokenizeCall& call, const blossom::v1::TokenizeResponse& response) {
  Json tokens = Json::array();
  for (int32_t id : response.ids()) tokens.push_back(id);
  Json strs = nullptr;
  if (call.return_token_strs) {
    strs = Json::array();
    for (const std::string& token : response.tokens()) strs.push_back(token);
  }
  return {{"count", response.ids_size()},
          {"max_model_len", response.max_total_tokens()},
          {"tokens", std::move(tokens)},
          {"token_strs", std::move(strs)}};
}

absl::StatusOr<blossom::v1::DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body) {
  BLOSSOM_ASSIGN_OR_RETURN(Json json, ParseJsonObject(body));
  absl::optional<std::string> model;
  BLOSSOM_RETURN_IF_ERROR(GetString(json, "model", &model));  // checked by the server
  auto tokens = json.find("tokens");
  if (tokens == json.end() || tokens->is_null()) return FieldError("tokens", "is required");
  std::vector<int32_t> ids;
  BLOSSOM_RETURN_IF_ERROR(GetTokenIds(json, "tokens", kMaxTokenIdList, &ids));
  blossom::v1::DetokenizeRequest request;
  request.mutable_ids()->Add(ids.begin(), ids.end());
  if (model) request.set_model(*model);  // checked by the server
  return request;
}

Json DetokenizeResponse(const blossom::v1::DetokenizeResponse& response) {
  return {{"prompt", response.text()}};
}

}  // namespace blossom::gateway::vllm
