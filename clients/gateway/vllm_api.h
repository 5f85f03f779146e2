// vLLM's /tokenize and /detokenize: request validation and translation to blossom.v1, and the
// response bodies. /tokenize is shared with TGI: a body with "prompt" or "messages" is vLLM's,
// one with "inputs" TGI's (tgi_api.h).
//
// Decisions (documented for clients):
// - /tokenize {"prompt": text} or {"messages": [...]} (rendered by the chat template, with vLLM's
//   add_generation_prompt, default true, and continue_final_message) answers {"count",
//   "max_model_len", "tokens", "token_strs"} (token_strs only with return_token_strs, else null).
// - /detokenize {"tokens": [ids]} answers {"prompt": text}; special tokens are kept (vLLM).
// - "model" is accepted and not checked (the server tokenizes for the one model it serves);
//   add_special_tokens changes nothing for BLOOM, whose tokenizer adds none.
#ifndef BLOSSOM_CLIENTS_GATEWAY_VLLM_API_H_
#define BLOSSOM_CLIENTS_GATEWAY_VLLM_API_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "clients/gateway/chat_template.h"
#include "clients/gateway/json_fields.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway::vllm {

// Whether a /tokenize body (a JSON object) is vLLM's rather than TGI's.
bool IsTokenizeRequest(const Json& body);

struct TokenizeCall {
  blossom::v1::TokenizeRequest request;
  bool return_token_strs = false;
  bool chat = false;  // from messages: the server's refusals of "text" name "messages"
};

absl::StatusOr<TokenizeCall> ParseTokenizeRequest(const Json& body,
                                                  const ChatTemplate& chat_template);
Json TokenizeResponse(const TokenizeCall& call, const blossom::v1::TokenizeResponse& response);

absl::StatusOr<blossom::v1::DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body);
Json DetokenizeResponse(const blossom::v1::DetokenizeResponse& response);

}  // namespace blossom::gateway::vllm

#endif  // BLOSSOM_CLIENTS_GATEWAY_VLLM_API_H_
