// The Tokenize and Detokenize RPCs' work, apart from the service's admission: text to ids (with
// each token's text and byte offsets) and ids to text, bounded by the server's token limits.
// Errors are statuses with the field and reason details the gRPC edge sends (status_details.h).
// Thread-safe: pure functions of a const Tokenizer.
#ifndef BLOSSOM_SERVER_TOKENIZE_RPC_H_
#define BLOSSOM_SERVER_TOKENIZE_RPC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom {

// The most tokens one Tokenize or Detokenize call handles. Not the context limit: vLLM and TGI
// tokenize texts longer than the model takes (clients count tokens to compare them with
// max_model_len, which the reply carries); only the reply's size is bounded (about 25 bytes a
// token, so 1.6 MB here).
inline constexpr int32_t kMaxTokenizeTokens = 65536;

// InvalidArgument for text that is not UTF-8; OutOfRange (PROMPT_TOO_LONG) past max_tokens
// (kMaxTokenizeTokens on the server). The reply carries max_total_tokens.
absl::Status TokenizeText(const Tokenizer& tokenizer, const v1::TokenizeRequest& request,
                          int32_t max_tokens, int32_t max_total_tokens,
                          v1::TokenizeResponse* response);

// InvalidArgument (INVALID_PROMPT, field "ids") for an id outside [0, vocab_size); OutOfRange
// past max_tokens ids (kMaxTokenizeTokens on the server).
absl::Status DetokenizeIds(const Tokenizer& tokenizer, const v1::DetokenizeRequest& request,
                           int32_t vocab_size, int32_t max_tokens,
                           v1::DetokenizeResponse* response);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_TOKENIZE_RPC_H_
