// OpenAI-compatible /v1/completions and /v1/chat/completions: request validation and
// translation to blossom.v1.GenerateRequest, and the response / SSE chunk encoding.
//
// Decisions (documented for clients):
// - Unknown fields are ignored (as OpenAI and vLLM do); known fields are strictly typed.
// - Unsupported features are a 400 naming the field: n != 1, best_of != 1, echo with stream,
//   suffix, logit_bias, tools, non-text content parts, response_format other than text.
// - completions echo=true: the prompt's text (a token-id prompt: its tokens' texts) precedes the
//   completion; with logprobs the prompt tokens come first in every logprobs list, the first
//   one's token_logprobs and top_logprobs null (OpenAI, vLLM; what lm-evaluation-harness scores).
// - vLLM extensions accepted: top_k, min_p, repetition_penalty, ignore_eos, min_tokens,
//   stop_token_ids, include_stop_str_in_output, priority (lower runs first).
// - Chat has no template in BLOOM tokenizers, so messages become a prompt like this
//   (system messages first, joined by newlines, then each turn on its own line):
//       <system text>\n\n
//       User: <text>\n
//       Assistant: <text>\n
//       Assistant:
//   Generation continues after the final "Assistant:". Without max_tokens the server default
//   (16) applies to both endpoints.
#ifndef BLOSSOM_CLIENTS_GATEWAY_OPENAI_API_H_
#define BLOSSOM_CLIENTS_GATEWAY_OPENAI_API_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "clients/gateway/json_fields.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway::openai {

struct CompletionRequest {
  bool chat = false;
  blossom::v1::GenerateRequest request;  // prompt, sampling, stopping and model
  std::string model;                     // the model name echoed in responses
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // completions: logprobs given; chat: logprobs=true
  int top_logprobs = 0;
  // completions: echo=true puts the prompt before the completion, in text and (with logprobs)
  // in the logprobs lists, the first prompt token's logprob null (OpenAI, vLLM).
  bool echo = false;
};

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body);
absl::StatusOr<CompletionRequest> ParseChatRequest(absl::string_view body);
// The chat template above; FieldErrors name messages[i].
absl::StatusOr<std::string> RenderChatPrompt(const Json& messages);

// "stop" (EOS, stop token, stop string), "length", "abort" (cancelled) or "error".
const char* FinishReasonString(blossom::v1::FinishReason reason);

// The whole (non-streaming) response body.
Json CompletionResponse(const CompletionRequest& request, const blossom::v1::GenerateResponse& response,
                        const std::string& id, int64_t created);

// Encodes a GenerateStream as Server-Sent Events. Not thread-safe: one per request, fed in
// stream order.
class StreamEncoder {
 public:
  StreamEncoder(const CompletionRequest& request, std::string id, int64_t created);
  // The first events (chat: the assistant role chunk), possibly "".
  std::string Start();
  // Events for one stream message, possibly "". After the final message it also emits the
  // usage chunk (if requested) and "data: [DONE]".
  std::string OnMessage(const blossom::v1::GenerateStreamResponse& message);
  // An error event in OpenAI's shape followed by "data: [DONE]", for failures mid-stream.
  std::string Error(int http_status, absl::string_view message);

 private:
  Json Chunk(Json choice) const;
  Json LogprobsFor(const blossom::v1::Token& token);

  const CompletionRequest& request_;
  const std::string id_;
  const int64_t created_;
  size_t text_offset_ = 0;
};

}  // namespace blossom::gateway::openai

#endif  // BLOSSOM_CLIENTS_GATEWAY_OPENAI_API_H_
