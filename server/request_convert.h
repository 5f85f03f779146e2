// Conversion between the blossom.v1 wire types and the engine's types, and the one place where
// absl::Status becomes a gRPC status.
//
// Validation happens here for what only the API knows (which prompt form was used, the
// server's input-length limit, the model name) and in the engine for everything else
// (sampling ranges, vocabulary, the total-token limit); both produce INVALID_ARGUMENT messages
// that name the field, so clients get one consistent error style.
#ifndef BLOSSOM_SERVER_REQUEST_CONVERT_H_
#define BLOSSOM_SERVER_REQUEST_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/support/status.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom {

// Longest model name accepted in a request (longer ones are INVALID_ARGUMENT, never echoed).
inline constexpr size_t kMaxModelNameBytes = 256;
// Longest message of a status sent to a client (ToGrpcStatus cuts longer ones).
inline constexpr size_t kMaxStatusMessageBytes = 1024;

struct RequestLimits {
  int32_t max_input_tokens = 1024;
  std::string served_model_name;
};

// Builds the engine request: tokenizes text prompts, fills defaults for absent optional fields,
// and checks the API-level limits. InvalidArgument names the field ("sampling.top_p", ...).
absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& request,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits);

v1::FinishReason ToProtoFinishReason(FinishReason reason);

// The token part of a stream message or unary response; logprobs only when requested.
void FillToken(const TokenEvent& token, const Tokenizer& tokenizer, bool with_logprobs,
               v1::Token* out);

// GenerateResponse.prompt_logprobs: the first prompt token without a logprob, then the engine's
// scored prompt tokens.
void FillPromptLogprobs(int32_t first_prompt_token, const std::vector<PromptLogprob>& scored,
                        const Tokenizer& tokenizer,
                        google::protobuf::RepeatedPtrField<v1::Token>* out);

// Usage, timings and finish reason of a final engine event.
void FillFinalInfo(const EngineEvent& final_event, const std::string& request_id,
                   v1::FinalInfo* out);

// The edge conversion: same code, same message, cut to kMaxStatusMessageBytes. (absl and gRPC
// share the canonical codes.)
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_REQUEST_CONVERT_H_
