// Hugging Face TGI-compatible /generate, /generate_stream, /tokenize and /info: request
// validation (TGI's rules: temperature > 0, top_k > 0, top_p and typical_p in (0, 1),
// repetition_penalty > 0, max_new_tokens >= 1, at most 4 stop sequences) and response encoding.
// Sampling is on when do_sample is true or a sampling parameter has an effect (temperature
// other than 1, top_k, top_p or typical_p below 1), as TGI's NextTokenChooser decides; otherwise
// decoding is greedy (TGI's default). decoder_input_details turns details on (as TGI) and fills
// details.prefill with the prompt tokens' logprobs (the first null); top_n_tokens (<= 20) fills
// details.top_tokens and each stream event's top_tokens. truncate keeps the last N input tokens.
// return_full_text defaults to false, and to true on POST / (TGI's compat route, for a
// text-generation model such as BLOOM). Unsupported: watermark, adapter_id (422 naming the
// field). Without max_new_tokens the request generates up to max_total_tokens - input tokens, as
// TGI does since 1.1.1 (its default was 20 before). best_of (up to kMaxBestOf, as TGI's
// --max-best-of): that many sampled candidates, the one with the highest mean token logprob
// returned, the others in details.best_of_sequences; as TGI, it needs sampling, no seed, and no
// stream. Each token of a stream or of details carries its logprob, a number as TGI's
// Token.logprob always is: the server is asked for the chosen token's (sampling.logprobs 0).
#ifndef BLOSSOM_CLIENTS_GATEWAY_TGI_API_H_
#define BLOSSOM_CLIENTS_GATEWAY_TGI_API_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "clients/gateway/json_fields.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway::tgi {

struct GenerateRequest {
  blossom::v1::GenerateRequest request;
  std::string inputs;
  bool details = false;
  bool return_full_text = false;
  bool decoder_input_details = false;  // details.prefill: the prompt tokens with logprobs
  int top_n_tokens = 0;                // details.top_tokens / each stream event's top_tokens
  int best_of = 1;                     // candidates sampled; the best is the answer
};

// Most candidates of a best_of request (TGI's --max-best-of; its default is 2).
inline constexpr int kMaxBestOf = 8;

// `compat_route`: POST / (return_full_text defaults to true there). `stream`: /generate_stream
// (and "stream": true on POST /), whose every token carries its logprob (TGI's Token.logprob is
// never null), and which refuses decoder_input_details and best_of above 1, as TGI.
absl::StatusOr<GenerateRequest> ParseGenerateRequest(absl::string_view body,
                                                     bool compat_route = false,
                                                     bool stream = false);
Json GenerateResponse(const GenerateRequest& request, const blossom::v1::GenerateResponse& response);
// best_of > 1: candidates[best] is the answer and the others, in order, details.best_of_sequences.
Json BestOfResponse(const GenerateRequest& request,
                    const std::vector<blossom::v1::GenerateResponse>& candidates);

// {"inputs": "...", "add_special_tokens": bool (default true)}.
absl::StatusOr<blossom::v1::TokenizeRequest> ParseTokenizeRequest(absl::string_view body);
// [{"id", "text", "start", "stop"}, ...]: as TGI, each token's text is the slice of `input`
// (the request's text) between its byte offsets ("" where an end falls inside a character),
// not the vocabulary's spelling ("Ġworld").
Json TokenizeResponse(absl::string_view input, const blossom::v1::TokenizeResponse& response);

Json InfoJson(const blossom::v1::ModelInfo& info, const std::string& model_id);

// "eos_token", "stop_sequence" or "length"; "length" whenever the generation reached its
// max_new_tokens (TGI checks the length before EOS and stop sequences).
const char* FinishReasonString(const blossom::v1::FinalInfo& final);

// Encodes a GenerateStream as TGI's SSE events ("data:{...}\n\n"); the last carries
// generated_text (and details when requested). Not thread-safe: one per request.
class StreamEncoder {
 public:
  explicit StreamEncoder(const GenerateRequest& request) : request_(request) {}
  std::string OnMessage(const blossom::v1::GenerateStreamResponse& message);
  // An error event (`error_json`: api_errors' ErrorJson), for failures mid-stream.
  std::string Error(absl::string_view error_json);

 private:
  const GenerateRequest& request_;
  std::string text_;
  int index_ = 0;
};

}  // namespace blossom::gateway::tgi

#endif  // BLOSSOM_CLIENTS_GATEWAY_TGI_API_H_
