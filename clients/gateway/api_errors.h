// Error conversion at the HTTP edge: absl/gRPC status -> HTTP status, and the error bodies of
// the OpenAI ({"error":{"message","type","param","code"}}) and TGI ({"error","error_type"}) APIs.
//
// Statuses from the server arrive with google.rpc details (//server:grpc_status's
// FromGrpcStatus restores them as payloads): the BadRequest field becomes OpenAI's `param`
// (translated from the blossom.v1 name to the route's), the ErrorInfo reason OpenAI's `code`,
// and the RetryInfo delay the Retry-After header. Nothing here matches message text.
#ifndef BLOSSOM_CLIENTS_GATEWAY_API_ERRORS_H_
#define BLOSSOM_CLIENTS_GATEWAY_API_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/http_server.h"

namespace blossom::gateway {

// kOpenAIChat differs from kOpenAI only in the name of the prompt field ("messages").
enum class ApiFlavor { kOpenAI, kOpenAIChat, kTgi };

// INVALID_ARGUMENT/FAILED_PRECONDITION/OUT_OF_RANGE -> 400 on OpenAI routes, 422 on TGI routes
// (an over-long prompt included, as vLLM/OpenAI and TGI answer it); UNAUTHENTICATED 401;
// PERMISSION_DENIED 403; NOT_FOUND 404; RESOURCE_EXHAUSTED 429 when it carries a RetryInfo (the
// server's overload refusals always do), else 413 (gRPC's own message-size refusal, which a
// retry cannot cure); UNIMPLEMENTED 501; UNAVAILABLE and CANCELLED (the server cut the call: a
// client that went away gets no answer) 503; DEADLINE_EXCEEDED 504; anything else (a failed
// generation) 500, on TGI routes 424 as TGI.
int HttpStatusFor(const absl::Status& status, ApiFlavor flavor);

// The OpenAI request field a blossom.v1 field path stands for ("stopping.max_new_tokens" ->
// "max_tokens"); a gateway-side field name is returned unchanged.
std::string OpenAIParamFor(absl::string_view field, ApiFlavor flavor);
// OpenAI's `code` for an ErrorInfo reason ("context_length_exceeded", "model_not_found" for
// UNKNOWN_MODEL only, ...); "" for none (null in the body).
std::string OpenAICodeFor(absl::string_view reason, int http_status);

// The error bodies, `type` by status: OpenAI's authentication_error 401, permission_error 403,
// rate_limit_error 429, service_unavailable_error 503, timeout_error 504, any other 4xx
// invalid_request_error (a 4xx is never a server_error), other 5xx server_error; TGI's
// `error_type` authentication, permission, not_found 404, generation 424 (TGI's failed
// generation), overloaded 429, unhealthy 503, timeout 504, any other 4xx validation, other 5xx
// generation. An empty `code` is OpenAICodeFor("", http_status).
std::string OpenAIErrorJson(int http_status, absl::string_view message, absl::string_view param,
                            absl::string_view code = "");
std::string TgiErrorJson(int http_status, absl::string_view message);

// A JSON error response in the flavour's shape; 429 and 503 (the gateway draining, the
// backend not ready, too many connections) carry "Retry-After: 1".
http::Response ErrorResponse(ApiFlavor flavor, int http_status, absl::string_view message,
                             absl::string_view param = "");
// The same for a status: param and code from its details, Retry-After (429 and 503) from its
// RetryInfo (rounded up to whole seconds). Messages are truncated to 1 KiB.
http::Response ErrorResponse(ApiFlavor flavor, const absl::Status& status);

// ErrorResponse(flavor, status)'s body alone (param and code from the details), for a failure
// after a stream's headers went out: the error event carries what the unary answer would.
std::string ErrorJson(ApiFlavor flavor, const absl::Status& status);

// NOT_FOUND for a model this gateway does not serve, as the server refuses one: field `model`,
// reason UNKNOWN_MODEL (so OpenAI's code model_not_found, which a 404 for an unknown path lacks).
absl::Status UnknownModelError(absl::string_view message);

// What a client is told when the backend cannot be reached.
inline constexpr char kBackendUnavailableMessage[] = "the model server is unavailable; retry later";

// Whether `status` is an UNAVAILABLE of gRPC's transport (no connection to the server, or one
// that broke) rather than the server's own refusal: the server's UNAVAILABLE answers (loading,
// draining, a failed engine) always carry an ErrorInfo in kErrorDomain.
bool IsTransportFailure(const absl::Status& status);

// A backend status as clients may see it: a transport failure, whose message names the
// backend's address and port ("failed to connect to all addresses; ... ipv4:10.0.0.7:8033"),
// becomes kBackendUnavailableMessage with a 1 s RetryInfo; anything else is returned as is.
absl::Status ForClient(absl::Status backend_status);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_API_ERRORS_H_
