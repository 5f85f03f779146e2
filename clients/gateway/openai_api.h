// OpenAI-compatible /v1/completions and /v1/chat/completions: request validation and
// translation to blossom.v1.GenerateRequest, and the response / SSE chunk encoding.
//
// Decisions (documented for clients):
// - Unknown fields are ignored (as OpenAI and vLLM do); known fields are strictly typed.
// - Several prompts (a list of strings or of token-id lists) and n > 1 give one choice each
//   (at most 128 choices); streamed, their chunks interleave, each with its choice's index, and
//   [DONE] follows the last choice's end. best_of (>= n, not streamed; on chat too, as vLLM):
//   best_of candidates per prompt, the n with the highest mean token logprob returned
//   (best_of.h). use_beam_search: beam_search.h.
// - Unsupported features are a 400 naming the field: best_of below n or above it with stream,
//   suffix, tool_choice "auto" (tool_calls.h), non-text content parts, truncate_prompt_tokens
//   with echo,
//   prompt_logprobs -1 (the whole vocabulary). Structured output (response_format, guided_*,
//   structured_outputs) is structured_outputs.h's; function calling tool_calls.h's.
// - completions echo=true: the prompt's text (a token-id prompt: its tokens' texts) precedes the
//   completion; with logprobs the prompt tokens come first in every logprobs list, the first
//   one's token_logprobs and top_logprobs null (OpenAI, vLLM; what lm-evaluation-harness scores).
//   Streamed, they lead each choice's first chunk (vLLM).
// - vLLM extensions accepted: top_k, min_p, repetition_penalty, ignore_eos, min_tokens,
//   stop_token_ids, include_stop_str_in_output, skip_special_tokens (default true), priority
//   (lower runs first), truncate_prompt_tokens (the last N prompt tokens kept),
//   allowed_token_ids, bad_words and guided_choice (or structured_outputs.choice); OpenAI's
//   logit_bias ({"<id>": bias in [-100, 100]}).
// - Up to 16 stop sequences (the server's limit; OpenAI allows 4, vLLM any number).
// - Chat messages become one prompt through the ChatTemplate (chat_template.h; --chat-template).
// - Without max_tokens: completions generate OpenAI's default of 16 tokens, chat up to the
//   context limit (max_total_tokens - prompt tokens), as OpenAI and vLLM. An explicit
//   `"max_tokens": null` runs to the context limit on both: it is vLLM's None, and only an
//   absent completions field takes the default 16 there. Chat's max_completion_tokens
//   (OpenAI's current name) wins over max_tokens when both are given, as in vLLM.
// - Streams: stream_options.include_usage adds a last chunk with the usage ("usage": null on
//   the others); with vLLM's continuous_usage_stats as well, every chunk carries its choice's
//   usage so far (its prompt's tokens, the tokens it sent, their total).
// - finish_reason is "stop" or "length" only (a cancelled or failed generation is "length");
//   vLLM's stop_reason says which stop: the stop string, the stop token's id, or null;
// - text_offset counts characters (code points), as OpenAI and vLLM;
//   system_fingerprint is the server's ("blossom-<version>-<dtype>"), on the response and, when
//   streaming, on the final chunks.
// - Logprob `bytes` are the token's raw bytes (exact for partial UTF-8 characters); a logprob
//   is never below -9999.0 (OpenAI's and vLLM's floor for a token the model rules out).
// - vLLM's prompt_logprobs (0 to 20; not with stream, where 0 is accepted and sends nothing):
//   a list with null for the first prompt token, then {"<id>": {logprob, rank,
//   decoded_token}} holding the prompt token (rank: the tokens at least as likely, itself
//   included) and its N most likely alternatives (ranks 1 to N); on each completions choice, on the chat
//   response itself (vLLM's places).
#ifndef BLOSSOM_CLIENTS_GATEWAY_OPENAI_API_H_
#define BLOSSOM_CLIENTS_GATEWAY_OPENAI_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "clients/gateway/chat_template.h"
#include "clients/gateway/json_fields.h"
#include "clients/gateway/tool_calls.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway::openai {

struct CompletionRequest {
  bool chat = false;
  blossom::v1::GenerateRequest request;  // prompt, sampling, stopping and model
  std::string model;                     // the model name echoed in responses
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // vLLM's stream_options.continuous_usage_stats (with include_usage): every chunk carries its
  // choice's usage so far.
  bool continuous_usage = false;
  bool logprobs = false;       // completions: logprobs given; chat: logprobs=true
  int top_logprobs = 0;
  // completions: echo=true puts the prompt before the completion, in text and (with logprobs)
  // in the logprobs lists, the first prompt token's logprob null (OpenAI, vLLM).
  bool echo = false;
  // chat: echo=true with a last message of the answer's role (assistant): its text, which each
  // choice's content starts with (vLLM; a stream sends it after the role, without logprobs).
  std::string chat_echo;
  // vLLM's prompt_logprobs (-1: not asked; never with stream): per prompt token its logprob,
  // rank and this many alternatives, on each completions choice and on a chat response.
  int prompt_logprobs = -1;
  // completions: echo with max_tokens 0 (scoring the prompt): one token is generated, as the
  // engine must, and left out of text, logprobs and usage.
  bool prompt_only = false;
  int n = 1;  // choices per prompt
  // best_of (>= n): candidates sampled per prompt, of which the n with the highest mean token
  // logprob are the choices (best first). request.batch then holds best_of per prompt.
  int best_of = 1;
  // Several choices (several prompts and/or n > 1; not streamed): one generation each, in
  // choice order (each prompt max(n, best_of) times; a seed is seed + i for the i-th of a
  // prompt). Empty for one choice: then `request` is the generation.
  std::vector<blossom::v1::GenerateRequest> batch;
  // chat: a named or required tool_choice (tool_calls.h): the output is answered as tool_calls.
  ToolChoice tool_choice;
  // The client's field that gave sampling.json_schema, sampling.regex or sampling.grammar
  // (response_format, guided_json, guided_grammar, structured_outputs.json,
  // tools[i].function.parameters, ...), or "".
  std::string constraint_param;
  // use_beam_search (beam_search.h): each prompt is one BeamSearch call with `beam`'s fields
  // (beam_width = n, length_penalty, early_stopping, logprobs), its beams the n choices.
  bool beam_search = false;
  blossom::v1::BeamSearchRequest beam;
};

// A server refusal of the request's schema, pattern or grammar (its field sampling.json_schema,
// sampling.regex or sampling.grammar) renamed to the client's own field; any other status
// unchanged.
absl::Status NameConstraintField(const CompletionRequest& request, absl::Status status);

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body);
absl::StatusOr<CompletionRequest> ParseChatRequest(absl::string_view body,
                                                   const ChatTemplate& chat_template = {});

// "stop" (EOS, stop token, stop string) or "length" (the limit, a cancellation, an error).
const char* FinishReasonString(blossom::v1::FinishReason reason);

// The whole (non-streaming) response body, its keys in OpenAI's order (top_logprobs maps most
// likely first).
OrderedJson CompletionResponse(const CompletionRequest& request,
                               const blossom::v1::GenerateResponse& response,
                               const std::string& id, int64_t created);
// The same for a batch: responses[k] answers request.batch[k] and is choice k. Usage sums the
// choices' completion tokens and each prompt's tokens once. With best_of > n, the batch holds
// best_of candidates per prompt and the n best of each (best first) are the choices.
OrderedJson CompletionResponse(const CompletionRequest& request,
                               const std::vector<blossom::v1::GenerateResponse>& responses,
                               const std::string& id, int64_t created);

// Encodes the GenerateStream calls of one request (one per choice) as Server-Sent Events. Not
// thread-safe: one per request, fed each call's messages in stream order (calls interleaved).
class StreamEncoder {
 public:
  StreamEncoder(const CompletionRequest& request, std::string id, int64_t created);
  // The first events (chat: the assistant role chunk), possibly "".
  std::string Start();
  // Events for one stream message of choice `choice` (request.batch's index; 0 for one
  // choice), possibly "". After the last choice's final message it also emits the usage chunk
  // (if requested: every choice's completion tokens, each prompt's tokens once) and
  // "data: [DONE]".
  std::string OnMessage(const blossom::v1::GenerateStreamResponse& message, int choice = 0);
  // continuous_usage: choice `choice`'s prompt tokens, before the first event. The stream's
  // messages tell them only at the end, so the caller counts them first (a token-id prompt's
  // length, a text's tokens from the server's Tokenize); truncate_prompt_tokens is applied here.
  void SetPromptTokens(int choice, int32_t tokens);
  // An error event (`error_json`: api_errors' ErrorJson) followed by "data: [DONE]", for
  // failures mid-stream.
  std::string Error(absl::string_view error_json);

 private:
  // A chunk with choice `choice`'s `entry`, or with no choice (entry null, choice -1).
  OrderedJson Chunk(OrderedJson entry, int choice) const;
  OrderedJson LogprobsFor(const blossom::v1::Token& token, int choice);
  // The chat delta of a function-calling choice for `text` (final: the choice ended).
  OrderedJson ToolCallDelta(int choice, const std::string& text, bool final, std::string* finish);

  const CompletionRequest& request_;
  const std::string id_;
  const int64_t created_;
  const int choices_;
  std::vector<size_t> text_offset_;                   // per choice: characters so far
  std::vector<bool> echoed_;                          // per choice: the echo was sent
  std::vector<absl::optional<int32_t>> last_token_;  // per choice: for stop_reason
  // Function calls (request.tool_choice): per choice, whether the named call's header went out,
  // and a required call list's text, sent as tool_calls once whole.
  std::vector<bool> call_started_;
  std::vector<std::string> call_text_;
  // continuous_usage, per choice: its prompt's tokens (SetPromptTokens, then the final
  // message's count) and the tokens it sent so far.
  std::vector<int32_t> prompt_tokens_;
  std::vector<int32_t> completion_tokens_;
  int finals_ = 0;                                    // choices finished
  blossom::v1::Usage usage_;                          // summed over the finished choices
  std::string system_fingerprint_;  // known once a final message arrived
};

}  // namespace blossom::gateway::openai

#endif  // BLOSSOM_CLIENTS_GATEWAY_OPENAI_API_H_
