#include "clients/gateway/api_errors.h"

#include "clients/gateway/json_fields.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"
#include "server/grpc_status.h"
#include "server/status_details.h"

namespace blossom::gateway {
namespace {

std::string Header(const http::Response& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

// What the server sends for an over-long prompt, as the gateway receives it over gRPC.
absl::Status PromptTooLongFromServer() {
  absl::Status s = absl::OutOfRangeError("prompt is too long: 5000 tokens, max_input_tokens is 1024");
  s = WithReason(WithFieldViolation(s, "text", "5000 tokens"), error_reason::kPromptTooLong);
  return FromGrpcStatus(ToGrpcStatus(s));
}

TEST(ApiErrorsTest, MapsStatusCodes) {
  struct Case {
    absl::Status status;
    int openai, tgi;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("bad"), 400, 422},
      // An over-long prompt is a validation error: 400 as OpenAI and vLLM, 422 as TGI (no
      // longer a 413 found by matching "too long" in the message).
      {PromptTooLongFromServer(), 400, 422},
      {absl::InvalidArgumentError("prompt is too long: 5000 tokens"), 400, 422},
      {absl::OutOfRangeError("x"), 400, 422},
      {absl::UnauthenticatedError("x"), 401, 401},
      {absl::NotFoundError("x"), 404, 404},
      {WithRetryDelay(absl::ResourceExhaustedError("queue full"), absl::Seconds(1)), 429, 429},
      // Issue 14: gRPC's own size refusal (no RetryInfo) is no retry invitation.
      {absl::ResourceExhaustedError("Received message larger than max (5000000 vs. 4194304)"),
       413, 413},
      {absl::UnavailableError("x"), 503, 503},
      // A client that went away gets no answer; a CANCELLED that reaches a live client is the
      // server cutting the call (shutdown past its drain timeout): unavailable, not a 499.
      {absl::CancelledError("x"), 503, 503},
      {absl::DeadlineExceededError("x"), 504, 504},
      // A failed generation: TGI's own status is 424 (error_type "generation").
      {absl::InternalError("x"), 500, 424},
      {absl::UnknownError("x"), 500, 424},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HttpStatusFor(c.status, ApiFlavor::kOpenAI), c.openai) << c.status;
    EXPECT_EQ(HttpStatusFor(c.status, ApiFlavor::kOpenAIChat), c.openai) << c.status;
    EXPECT_EQ(HttpStatusFor(c.status, ApiFlavor::kTgi), c.tgi) << c.status;
  }
}

TEST(ApiErrorsTest, ErrorResponsesHaveTheRightShape) {
  http::Response r = ErrorResponse(ApiFlavor::kOpenAI, FieldError("top_p", "must be in (0, 1]"));
  EXPECT_EQ(r.status, 400);
  Json j = Json::parse(r.body);
  EXPECT_EQ(j["error"]["message"], "top_p: must be in (0, 1]");
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(r.body,
            R"({"error":{"message":"top_p: must be in (0, 1]","type":"invalid_request_error",)"
            R"("param":"top_p","code":null}})")
      << "OpenAI's field order";

  http::Response busy = ErrorResponse(
      ApiFlavor::kTgi, FromGrpcStatus(ToGrpcStatus(WithRetryDelay(
                           WithReason(absl::ResourceExhaustedError("queue full"), "QUEUE_FULL"),
                           absl::Seconds(1)))));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(Header(busy, "Retry-After"), "1");
  Json t = Json::parse(busy.body);
  EXPECT_EQ(t["error"], "queue full");
  EXPECT_EQ(t["error_type"], "overloaded");
  EXPECT_EQ(busy.body, R"({"error":"queue full","error_type":"overloaded"})");
}

TEST(ApiErrorsTest, ServerDetailsFillParamAndCode) {
  http::Response r = ErrorResponse(ApiFlavor::kOpenAI, PromptTooLongFromServer());
  EXPECT_EQ(r.status, 400);
  Json j = Json::parse(r.body);
  EXPECT_EQ(j["error"]["param"], "prompt");
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(Header(r, "Retry-After"), "");  // can never succeed: no retry invitation

  // On the chat route the prompt is the messages.
  Json chat = Json::parse(ErrorResponse(ApiFlavor::kOpenAIChat, PromptTooLongFromServer()).body);
  EXPECT_EQ(chat["error"]["param"], "messages");

  http::Response tgi = ErrorResponse(ApiFlavor::kTgi, PromptTooLongFromServer());
  EXPECT_EQ(tgi.status, 422);
  EXPECT_EQ(Json::parse(tgi.body)["error_type"], "validation");

  absl::Status sampling = FromGrpcStatus(ToGrpcStatus(WithReason(
      WithFieldViolation(absl::InvalidArgumentError("top_p must be in (0, 1], got 2"),
                         "sampling.top_p", "must be in (0, 1], got 2"),
      error_reason::kInvalidSamplingParams)));
  Json s = Json::parse(ErrorResponse(ApiFlavor::kOpenAI, sampling).body);
  EXPECT_EQ(s["error"]["param"], "top_p");
  EXPECT_EQ(s["error"]["code"], "invalid_sampling_params");
}

TEST(ApiErrorsTest, ParamNamesFollowTheRoute) {
  EXPECT_EQ(OpenAIParamFor("stopping.max_new_tokens", ApiFlavor::kOpenAI), "max_tokens");
  EXPECT_EQ(OpenAIParamFor("stopping.min_new_tokens", ApiFlavor::kOpenAI), "min_tokens");
  EXPECT_EQ(OpenAIParamFor("stopping.stop", ApiFlavor::kOpenAI), "stop");
  EXPECT_EQ(OpenAIParamFor("ids", ApiFlavor::kOpenAI), "tokens");  // Detokenize
  EXPECT_EQ(OpenAIParamFor("sampling.temperature", ApiFlavor::kOpenAIChat), "temperature");
  EXPECT_EQ(OpenAIParamFor("sampling.logprobs", ApiFlavor::kOpenAI), "logprobs");
  EXPECT_EQ(OpenAIParamFor("sampling.logprobs", ApiFlavor::kOpenAIChat), "top_logprobs");
  EXPECT_EQ(OpenAIParamFor("token_ids", ApiFlavor::kOpenAI), "prompt");
  EXPECT_EQ(OpenAIParamFor("model", ApiFlavor::kOpenAI), "model");
  EXPECT_EQ(OpenAIParamFor("messages[0].role", ApiFlavor::kOpenAIChat), "messages[0].role");
}

TEST(ApiErrorsTest, CodesComeFromReasons) {
  EXPECT_EQ(OpenAICodeFor("CONTEXT_LENGTH_EXCEEDED", 400), "context_length_exceeded");
  EXPECT_EQ(OpenAICodeFor("UNKNOWN_MODEL", 404), "model_not_found");
  // A 404 without a reason is a path no route serves (OpenAI: code null), not a model.
  EXPECT_EQ(OpenAICodeFor("", 404), "");
  EXPECT_EQ(OpenAICodeFor("INVALID_API_KEY", 401), "invalid_api_key");
  EXPECT_EQ(OpenAICodeFor("TOO_MANY_STOP_SEQUENCES", 400), "too_many_stop_sequences");
  EXPECT_EQ(OpenAICodeFor("", 400), "");
}

// A 4xx is the client's error in both APIs' types (431, 405 and the rest were server_error
// and TGI's "generation"); the route-not-found 404 and the unknown-model 404 differ by code.
TEST(ApiErrorsTest, EveryClientErrorHasAClientErrorType) {
  for (int status = 400; status < 500; ++status) {
    const Json openai = Json::parse(OpenAIErrorJson(status, "x", ""))["error"];
    EXPECT_NE(openai["type"], "server_error") << status;
    const std::string tgi = Json::parse(TgiErrorJson(status, "x"))["error_type"];
    if (status != 424) {  // 424 is TGI's failed generation
      EXPECT_NE(tgi, "generation") << status;
    }
  }
  EXPECT_EQ(Json::parse(OpenAIErrorJson(405, "use POST", ""))["error"]["type"],
            "invalid_request_error");
  EXPECT_EQ(Json::parse(TgiErrorJson(405, "use POST"))["error_type"], "validation");
  EXPECT_EQ(Json::parse(TgiErrorJson(424, "failed"))["error_type"], "generation");  // TGI's own
  EXPECT_EQ(Json::parse(OpenAIErrorJson(500, "failed", ""))["error"]["type"], "server_error");

  const Json route =
      Json::parse(ErrorResponse(ApiFlavor::kOpenAI, 404, "Invalid URL (POST /v1/nope)").body);
  EXPECT_EQ(route["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(route["error"]["code"].is_null()) << route;
  const http::Response model =
      ErrorResponse(ApiFlavor::kOpenAI, UnknownModelError("model 'x' does not exist"));
  EXPECT_EQ(model.status, 404);
  const Json m = Json::parse(model.body);
  EXPECT_EQ(m["error"]["code"], "model_not_found");
  EXPECT_EQ(m["error"]["param"], "model");
  EXPECT_EQ(m["error"]["type"], "invalid_request_error");
}

TEST(ApiErrorsTest, RetryAfterComesFromRetryInfo) {
  absl::Status loading = FromGrpcStatus(ToGrpcStatus(WithRetryDelay(
      WithReason(absl::UnavailableError("the model is loading"), "MODEL_LOADING"),
      absl::Milliseconds(4200))));
  http::Response r = ErrorResponse(ApiFlavor::kOpenAI, loading);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(Header(r, "Retry-After"), "5");  // rounded up
  EXPECT_EQ(Json::parse(r.body)["error"]["code"], "model_loading");
  // A 503 without RetryInfo says nothing about when; a bare 429 keeps the 1 s default.
  EXPECT_EQ(Header(ErrorResponse(ApiFlavor::kTgi, absl::UnavailableError("x")), "Retry-After"), "");
  EXPECT_EQ(Header(ErrorResponse(ApiFlavor::kTgi, 429, "slow down"), "Retry-After"), "1");
}

// The gateway's own 503s (draining, backend not ready, too many connections) invite a retry.
TEST(ApiErrorsTest, GatewayUnavailableInvitesARetry) {
  for (ApiFlavor flavor : {ApiFlavor::kOpenAI, ApiFlavor::kTgi}) {
    http::Response r = ErrorResponse(flavor, 503, "the gateway is shutting down");
    EXPECT_EQ(Header(r, "Retry-After"), "1");
  }
  EXPECT_EQ(Header(ErrorResponse(ApiFlavor::kOpenAI, 400, "bad"), "Retry-After"), "");
  EXPECT_EQ(Header(ErrorResponse(ApiFlavor::kOpenAI, 500, "failed"), "Retry-After"), "");
}

// gRPC's own UNAVAILABLE (no connection) names the backend's address: clients get a fixed
// message and a retry invitation. The server's UNAVAILABLE answers (with their ErrorInfo) and
// other codes pass unchanged.
TEST(ApiErrorsTest, TransportFailuresDoNotReachClients) {
  const grpc::Status refused(grpc::StatusCode::UNAVAILABLE,
                             "failed to connect to all addresses; last error: UNKNOWN: "
                             "ipv4:127.0.0.1:18033: Failed to connect to remote host: "
                             "Connection refused");
  const absl::Status transport = FromGrpcStatus(refused);
  EXPECT_TRUE(IsTransportFailure(transport));
  const absl::Status shown = ForClient(transport);
  EXPECT_EQ(shown.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shown.message(), kBackendUnavailableMessage);
  for (ApiFlavor flavor : {ApiFlavor::kOpenAI, ApiFlavor::kTgi}) {
    http::Response r = ErrorResponse(flavor, shown);
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(Header(r, "Retry-After"), "1");
    EXPECT_EQ(r.body.find("ipv4:"), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find("18033"), std::string::npos) << r.body;
  }

  const absl::Status draining = FromGrpcStatus(ToGrpcStatus(WithRetryDelay(
      WithReason(absl::UnavailableError("the server is shutting down"), "SHUTTING_DOWN"),
      absl::Seconds(2))));
  EXPECT_FALSE(IsTransportFailure(draining));
  EXPECT_EQ(ForClient(draining).message(), "the server is shutting down");
  EXPECT_FALSE(IsTransportFailure(absl::InternalError("ipv4:1.2.3.4:5")));
  EXPECT_EQ(ForClient(absl::DeadlineExceededError("Deadline Exceeded")).message(),
            "Deadline Exceeded");
}

}  // namespace
}  // namespace blossom::gateway
