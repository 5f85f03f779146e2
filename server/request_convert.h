// Conversion between the blossom.v1 wire types and the engine's types.
//
// Validation happens here for what only the API knows (which prompt form was used, the
// server's input-length limit, the model name) and in the engine for everything else
// (sampling ranges, vocabulary, the total-token limit). Every refusal leaves here with
// structured details (//server:status_details): a BadRequest field violation naming the
// blossom.v1 field ("sampling.top_p") and an ErrorInfo reason; //server:grpc_status sends them.
#ifndef BLOSSOM_SERVER_REQUEST_CONVERT_H_
#define BLOSSOM_SERVER_REQUEST_CONVERT_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/guided/constraint_cache.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom {

// Longest model name accepted in a request (longer ones are INVALID_ARGUMENT, never echoed).
inline constexpr size_t kMaxModelNameBytes = 256;

struct RequestLimits {
  int32_t max_input_tokens = 1024;
  std::string served_model_name;
  // The engine's cap on prompt + max_new_tokens (stopping.max_new_tokens_to_limit fills it).
  int32_t max_total_tokens = 2048;
  // --scheduling_policy=priority: requests may set `priority`. Off (fcfs, vLLM's default), a
  // non-zero priority is refused: any client could otherwise jump every other client's queue.
  bool priority_scheduling = false;
  // The engine's waiting-queue capacity (SchedulerConfig::max_waiting_requests): a request's
  // group_size above it could never be queued whole.
  int64_t max_waiting_requests = std::numeric_limits<int64_t>::max();
};

// Builds the engine request: tokenizes text prompts, fills defaults for absent optional fields,
// compiles a json_schema, regex or grammar through `guided_constraints` (null: refused), and
// checks the API-level limits. Errors carry a field violation and a reason. With
// `guided_mode` kRecentOnly nothing is compiled or waited for: a constraint that is not recent
// gives a status for which GuidedConstraintNotCompiled() holds (the caller then converts again,
// with kCompile, where blocking is allowed).
absl::StatusOr<EngineRequest> ToEngineRequest(
    const v1::GenerateRequest& request, const Tokenizer& tokenizer, const RequestLimits& limits,
    ConstraintCache* guided_constraints = nullptr,
    ConstraintCache::Mode guided_mode = ConstraintCache::Mode::kCompile);

// A request's `model` (empty: the served one) checked against the served name: longer than
// kMaxModelNameBytes is INVALID_ARGUMENT (INVALID_MODEL_NAME, never echoed), another name
// NOT_FOUND (UNKNOWN_MODEL). Generate, BeamSearch, Tokenize and Detokenize share it.
absl::Status CheckModelName(absl::string_view model, const RequestLimits& limits);

// Whether ToEngineRequest stopped, with kRecentOnly, at a constraint that is not compiled yet.
bool GuidedConstraintNotCompiled(const absl::Status& status);

// A group_size (requests a client submits together, this one included; 0 = unset) checked
// against the waiting queue, for Generate and BeamSearch alike: negative is INVALID_ARGUMENT
// (INVALID_REQUEST); above limits.max_waiting_requests it could never be queued whole, so it is
// OUT_OF_RANGE (GROUP_TOO_LARGE) without RetryInfo, not a QUEUE_FULL every retry would meet.
// `what` names what the group counts in the message ("generations", "beams").
absl::Status CheckGroupSize(int32_t group_size, const RequestLimits& limits,
                            absl::string_view what);

// Retry delays sent with overload refusals (google.rpc.RetryInfo; the gateway's Retry-After).
inline constexpr absl::Duration kQueueFullRetryDelay = absl::Seconds(1);
inline constexpr absl::Duration kUnavailableRetryDelay = absl::Seconds(1);
inline constexpr absl::Duration kLoadingRetryDelay = absl::Seconds(5);
// Structured output refused because other constraints hold every compile slot: those compiles
// end within about a second each (the compilers' work limits).
inline constexpr absl::Duration kGuidedCompileRetryDelay = absl::Seconds(1);
// RESOURCE_EXHAUSTED, reason GUIDED_COMPILE_BUSY, RetryInfo kGuidedCompileRetryDelay: a
// structured-output request refused because compiles are backed up (nothing is wrong with it).
absl::Status GuidedCompileBusyError(absl::string_view message);

// Adds details to the engine's refusal of `request` (Engine::Submit's status): the queue being
// full becomes QUEUE_FULL with a retry delay; FAILED_PRECONDITION (the request's masks and bans
// leave no first token) NO_TOKEN_POSSIBLE; an invalid argument is attributed to its field by
// re-running the engine's validators on the request's parameters one at a time (the first that
// fails is the culprit; no message parsing), else to the prompt's token ids, else it is the
// total-token capacity (CONTEXT_LENGTH_EXCEEDED on stopping.max_new_tokens). `prompt_field` is
// "text" or "token_ids"; `vocab_size` the model's.
absl::Status DescribeEngineRefusal(absl::Status status, const EngineRequest& request,
                                   int32_t vocab_size, absl::string_view prompt_field);

// The status a generation or beam search ends with when the engine ended it early (a final
// event's, a search's outcome's): one the engine's shutdown cut (IsEngineShutdown: kAborted) is
// UNAVAILABLE with SHUTTING_DOWN and a retry delay, as a call refused while draining, since
// another replica can run it; another UNAVAILABLE (the model failed for good) gets MODEL_FAILED
// and no retry delay, as the refusals after it; FAILED_PRECONDITION (the request's masks, bans,
// grammar and penalties left no token to sample) gets NO_TOKEN_POSSIBLE; any other is returned
// unchanged.
absl::Status DescribeEngineEnd(absl::Status status);

v1::FinishReason ToProtoFinishReason(FinishReason reason);

// "blossom-<version>-<dtype>": FinalInfo.system_fingerprint for a server of `model_info`.
std::string SystemFingerprint(const v1::ModelInfo& model_info);

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

}  // namespace blossom

#endif  // BLOSSOM_SERVER_REQUEST_CONVERT_H_
