#include "clients/gateway/api_errors.h"

#include "absl/strings/match.h"
#include "clients/gateway/json_fields.h"

namespace blossom::gateway {
namespace {

constexpr size_t kMaxMessage = 1024;

const char* OpenAIType(int status) {
  switch (status) {
    case 400: case 413: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    case 504: return "timeout_error";
    default: return "server_error";
  }
}

const char* TgiType(int status) {
  switch (status) {
    case 400: case 413: case 422: return "validation";
    case 401: return "authentication";
    case 403: return "permission";
    case 404: return "not_found";
    case 429: return "overloaded";
    case 503: return "unhealthy";
    case 504: return "timeout";
    default: return "generation";
  }
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

int HttpStatusFor(const absl::Status& status, ApiFlavor flavor) {
  const int invalid = flavor == ApiFlavor::kTgi ? 422 : 400;
  switch (status.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      // The server reports an oversized prompt as "... too long ..."; that is a 413.
      return absl::StrContains(status.message(), "too long") ? 413 : invalid;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted:
      // gRPC's own refusal of an oversized message can never succeed on retry: not a 429.
      return absl::StrContains(status.message(), "message larger than max") ? 413 : 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string OpenAIErrorJson(int http_status, absl::string_view message, absl::string_view param) {
  Json error = {{"message", std::string(message.substr(0, kMaxMessage))},
                {"type", OpenAIType(http_status)},
                {"param", param.empty() ? Json(nullptr) : Json(std::string(param))},
                {"code", http_status == 404 ? Json("model_not_found") : Json(nullptr)}};
  return Dump(Json{{"error", error}});
}

std::string TgiErrorJson(int http_status, absl::string_view message) {
  return Dump(Json{{"error", std::string(message.substr(0, kMaxMessage))},
                   {"error_type", TgiType(http_status)}});
}

http::Response ErrorResponse(ApiFlavor flavor, int http_status, absl::string_view message,
                             absl::string_view param) {
  http::Response response;
  response.status = http_status;
  response.headers.emplace_back("Content-Type", "application/json");
  if (http_status == 429) response.headers.emplace_back("Retry-After", "1");
  response.body = flavor == ApiFlavor::kOpenAI ? OpenAIErrorJson(http_status, message, param)
                                               : TgiErrorJson(http_status, message);
  return response;
}

http::Response ErrorResponse(ApiFlavor flavor, const absl::Status& status) {
  return ErrorResponse(flavor, HttpStatusFor(status, flavor), status.message(), ParamOf(status));
}

}  // namespace blossom::gateway
