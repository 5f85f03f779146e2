#include "clients/gateway/api_errors.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "clients/gateway/json_fields.h"
#include "server/status_details.h"

namespace blossom::gateway {
namespace {

constexpr size_t kMaxMessage = 1024;

bool IsClientError(int status) { return status >= 400 && status < 500; }

// A 4xx is the request's fault, never a server_error: every 4xx without a type of its own
// (404 and 405 included, as OpenAI types an unknown model or URL) is invalid_request_error.
const char* OpenAIType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    case 504: return "timeout_error";
    default: return IsClientError(status) ? "invalid_request_error" : "server_error";
  }
}

// TGI's error types; 424 is its failed generation, other 4xx without a type of their own are
// the request's fault (validation).
const char* TgiType(int status) {
  switch (status) {
    case 401: return "authentication";
    case 403: return "permission";
    case 404: return "not_found";
    case 424: return "generation";
    case 429: return "overloaded";
    case 503: return "unhealthy";
    case 504: return "timeout";
    default: return IsClientError(status) ? "validation" : "generation";
  }
}

http::Response JsonError(ApiFlavor flavor, int http_status, absl::string_view message,
                         absl::string_view param, absl::string_view code,
                         const std::string& retry_after) {
  http::Response response;
  response.status = http_status;
  response.headers.emplace_back("Content-Type", "application/json");
  if (!retry_after.empty()) response.headers.emplace_back("Retry-After", retry_after);
  response.body = flavor == ApiFlavor::kTgi ? TgiErrorJson(http_status, message)
                                            : OpenAIErrorJson(http_status, message, param, code);
  return response;
}

}  // namespace

int HttpStatusFor(const absl::Status& status, ApiFlavor flavor) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return flavor == ApiFlavor::kTgi ? 422 : 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted:
      return DetailsOf(status).retry_delay.has_value() ? 429 : 413;
    // The gateway cancels a call only for a client that went away, which gets no answer; a
    // CANCELLED that reaches a live client is the server cutting the call (shut down past its
    // drain timeout): 503, another replica or a retry may serve it.
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    // TGI answers a failed generation with 424 (its text-generation client raises
    // GenerationError for it); OpenAI-style servers with 500.
    default: return flavor == ApiFlavor::kTgi ? 424 : 500;
  }
}

std::string OpenAIParamFor(absl::string_view field, ApiFlavor flavor) {
  // Only names that differ; the other sampling./stopping. fields keep their name.
  static const auto* const kRenamed = new std::map<std::string, std::string, std::less<>>{
      {"stopping.max_new_tokens", "max_tokens"},
      {"stopping.min_new_tokens", "min_tokens"},
      {"sampling.prompt_logprobs", "logprobs"},
      {"ids", "tokens"},  // Detokenize's ids are vLLM /detokenize's tokens
      {"beam_width", "n"},  // BeamSearch's width is vLLM's n with use_beam_search
      {"group_size", "n"},  // a request's choices (prompts x n, or best_of) queued together
  };
  if (field == "text" || field == "token_ids" || field == "prompt") {
    return flavor == ApiFlavor::kOpenAIChat ? "messages" : "prompt";
  }
  if (flavor == ApiFlavor::kOpenAIChat && field == "sampling.logprobs") return "top_logprobs";
  auto it = kRenamed->find(field);
  if (it != kRenamed->end()) return it->second;
  for (absl::string_view prefix : {"sampling.", "stopping."}) {
    if (absl::StartsWith(field, prefix)) return std::string(field.substr(prefix.size()));
  }
  return std::string(field);
}

std::string OpenAICodeFor(absl::string_view reason, int http_status) {
  // OpenAI's own codes where one exists; otherwise the reason in OpenAI's snake_case.
  if (reason == error_reason::kPromptTooLong || reason == error_reason::kContextLengthExceeded) {
    return "context_length_exceeded";
  }
  // Only a model that is not served: a 404 for a path no route serves has no code (OpenAI's
  // "Invalid URL" answer has none either).
  if (reason == error_reason::kUnknownModel) return "model_not_found";
  if (reason == error_reason::kInvalidApiKey || reason == error_reason::kMissingApiKey) {
    return "invalid_api_key";
  }
  return absl::AsciiStrToLower(reason);
}

std::string OpenAIErrorJson(int http_status, absl::string_view message, absl::string_view param,
                            absl::string_view code) {
  const std::string code_value =
      code.empty() ? OpenAICodeFor("", http_status) : std::string(code);
  // OpenAI's field order (the keys stay as written: OrderedJson).
  OrderedJson error = {
      {"message", std::string(message.substr(0, kMaxMessage))},
      {"type", OpenAIType(http_status)},
      {"param", param.empty() ? OrderedJson(nullptr) : OrderedJson(std::string(param))},
      {"code", code_value.empty() ? OrderedJson(nullptr) : OrderedJson(code_value)}};
  return Dump(OrderedJson{{"error", std::move(error)}});
}

std::string TgiErrorJson(int http_status, absl::string_view message) {
  return Dump(OrderedJson{{"error", std::string(message.substr(0, kMaxMessage))},
                          {"error_type", TgiType(http_status)}});
}

http::Response ErrorResponse(ApiFlavor flavor, int http_status, absl::string_view message,
                             absl::string_view param) {
  return JsonError(flavor, http_status, message, param, "",
                   http_status == 429 || http_status == 503 ? "1" : "");
}

http::Response ErrorResponse(ApiFlavor flavor, const absl::Status& status) {
  const StatusDetails details = DetailsOf(status);
  const int http_status = HttpStatusFor(status, flavor);
  std::string retry_after;
  if ((http_status == 429 || http_status == 503) && details.retry_delay.has_value()) {
    const double seconds = absl::ToDoubleSeconds(*details.retry_delay);
    retry_after = absl::StrCat(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds))));
  } else if (http_status == 429) {
    retry_after = "1";
  }
  const std::string param = details.field.empty() ? "" : OpenAIParamFor(details.field, flavor);
  return JsonError(flavor, http_status, status.message(), param,
                   OpenAICodeFor(details.reason, http_status), retry_after);
}

std::string ErrorJson(ApiFlavor flavor, const absl::Status& status) {
  const int http_status = HttpStatusFor(status, flavor);
  if (flavor == ApiFlavor::kTgi) return TgiErrorJson(http_status, status.message());
  const StatusDetails details = DetailsOf(status);
  const std::string param = details.field.empty() ? "" : OpenAIParamFor(details.field, flavor);
  return OpenAIErrorJson(http_status, status.message(), param,
                         OpenAICodeFor(details.reason, http_status));
}

absl::Status UnknownModelError(absl::string_view message) {
  absl::Status status = WithFieldViolation(absl::NotFoundError(message), "model", message);
  return WithReason(std::move(status), error_reason::kUnknownModel);
}

bool IsTransportFailure(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         DetailsOf(status).domain != kErrorDomain;
}

absl::Status ForClient(absl::Status backend_status) {
  if (!IsTransportFailure(backend_status)) return backend_status;
  return WithRetryDelay(absl::UnavailableError(kBackendUnavailableMessage), absl::Seconds(1));
}

}  // namespace blossom::gateway
