// Structured error details carried inside an absl::Status, in the google.rpc error model
// (proto/google/rpc/error_details.proto): a BadRequest field violation naming the request field,
// an ErrorInfo with a stable machine-readable reason, and a RetryInfo delay for overload.
//
// Inside the server and the gateway these travel as absl::Status payloads keyed by the detail's
// type URL ("type.googleapis.com/google.rpc.BadRequest") holding the serialized message, so they
// survive absl's Status plumbing unchanged; //server:grpc_status turns them into the
// `grpc-status-details-bin` trailer at the gRPC edge and back. Clients match on `reason`, never
// on message text.
//
// Thread-compatible free functions.
#ifndef BLOSSOM_SERVER_STATUS_DETAILS_H_
#define BLOSSOM_SERVER_STATUS_DETAILS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace blossom {

// ErrorInfo.domain of every reason below.
inline constexpr char kErrorDomain[] = "blossom.dev";

// ErrorInfo.reason values: stable API, documented in proto/README.md. Add, never rename.
namespace error_reason {
inline constexpr char kPromptTooLong[] = "PROMPT_TOO_LONG";              // > max_input_tokens
inline constexpr char kContextLengthExceeded[] = "CONTEXT_LENGTH_EXCEEDED";  // prompt + max_new_tokens
inline constexpr char kInvalidPrompt[] = "INVALID_PROMPT";
inline constexpr char kInvalidSamplingParams[] = "INVALID_SAMPLING_PARAMS";
inline constexpr char kInvalidStoppingParams[] = "INVALID_STOPPING_PARAMS";
inline constexpr char kTooManyStopSequences[] = "TOO_MANY_STOP_SEQUENCES";
inline constexpr char kInvalidBeamSearchParams[] = "INVALID_BEAM_SEARCH_PARAMS";
inline constexpr char kInvalidModelName[] = "INVALID_MODEL_NAME";
inline constexpr char kUnknownModel[] = "UNKNOWN_MODEL";
inline constexpr char kPriorityNotEnabled[] = "PRIORITY_NOT_ENABLED";  // --scheduling_policy fcfs
inline constexpr char kInvalidRequest[] = "INVALID_REQUEST";  // no more specific reason known
inline constexpr char kGroupTooLarge[] = "GROUP_TOO_LARGE";  // group_size > max_waiting_requests
inline constexpr char kNoTokenPossible[] = "NO_TOKEN_POSSIBLE";  // masks left no token
inline constexpr char kQueueFull[] = "QUEUE_FULL";
// Every structured-output compile slot stayed busy (engine/guided/constraint_cache.h).
inline constexpr char kGuidedCompileBusy[] = "GUIDED_COMPILE_BUSY";
inline constexpr char kModelLoading[] = "MODEL_LOADING";
inline constexpr char kShuttingDown[] = "SHUTTING_DOWN";
inline constexpr char kModelFailed[] = "MODEL_FAILED";  // the engine failed for good
inline constexpr char kMissingApiKey[] = "MISSING_API_KEY";
inline constexpr char kInvalidApiKey[] = "INVALID_API_KEY";
}  // namespace error_reason

// Type URLs of the payloads (and of google.protobuf.Any in google.rpc.Status.details).
inline constexpr char kBadRequestTypeUrl[] = "type.googleapis.com/google.rpc.BadRequest";
inline constexpr char kErrorInfoTypeUrl[] = "type.googleapis.com/google.rpc.ErrorInfo";
inline constexpr char kRetryInfoTypeUrl[] = "type.googleapis.com/google.rpc.RetryInfo";

// Longest field path / description kept in a detail (they may quote client input).
inline constexpr size_t kMaxDetailBytes = 256;

// Appends a BadRequest field violation (field path, why it is bad). No-op on OK.
absl::Status WithFieldViolation(absl::Status status, absl::string_view field,
                                absl::string_view description);
// Sets the ErrorInfo (reason, kErrorDomain), replacing an earlier one. No-op on OK.
absl::Status WithReason(absl::Status status, absl::string_view reason);
// Sets the RetryInfo delay. No-op on OK.
absl::Status WithRetryDelay(absl::Status status, absl::Duration delay);

// What a status carries, decoded; empty fields where a detail is absent or unparsable.
struct StatusDetails {
  std::string field;              // the first field violation's field
  std::string field_description;  // and its description
  std::string reason;             // ErrorInfo.reason
  std::string domain;             // ErrorInfo.domain
  absl::optional<absl::Duration> retry_delay;
};
StatusDetails DetailsOf(const absl::Status& status);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_STATUS_DETAILS_H_
