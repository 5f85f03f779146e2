// Error conversion at the HTTP edge: absl/gRPC status -> HTTP status, and the error bodies of
// the OpenAI ({"error":{"message","type","param","code"}}) and TGI ({"error","error_type"}) APIs.
#ifndef BLOSSOM_CLIENTS_GATEWAY_API_ERRORS_H_
#define BLOSSOM_CLIENTS_GATEWAY_API_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "server/http/http_server.h"

namespace blossom::gateway {

enum class ApiFlavor { kOpenAI, kTgi };

// gRPC and absl codes share numbering; the message is kept.
absl::Status FromGrpc(const grpc::Status& status);

// INVALID_ARGUMENT/FAILED_PRECONDITION/OUT_OF_RANGE -> 400 (TGI: 422), or 413 when the message
// says the prompt is "too long"; UNAUTHENTICATED 401; PERMISSION_DENIED 403; NOT_FOUND 404;
// RESOURCE_EXHAUSTED 429; CANCELLED 499; UNIMPLEMENTED 501; UNAVAILABLE 503;
// DEADLINE_EXCEEDED 504; anything else 500.
int HttpStatusFor(const absl::Status& status, ApiFlavor flavor);

std::string OpenAIErrorJson(int http_status, absl::string_view message, absl::string_view param);
std::string TgiErrorJson(int http_status, absl::string_view message);

// A JSON error response in the flavour's shape; 429 carries "Retry-After: 1".
http::Response ErrorResponse(ApiFlavor flavor, int http_status, absl::string_view message,
                             absl::string_view param = "");
// The same for a status (param from ParamOf). Messages are truncated to 1 KiB.
http::Response ErrorResponse(ApiFlavor flavor, const absl::Status& status);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_API_ERRORS_H_
