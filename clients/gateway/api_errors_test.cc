#include "clients/gateway/api_errors.h"

#include "clients/gateway/json_fields.h"
#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

TEST(ApiErrorsTest, MapsStatusCodes) {
  struct Case {
    absl::Status status;
    int openai, tgi;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("bad"), 400, 422},
      {absl::InvalidArgumentError("prompt is too long: 5000 tokens"), 413, 413},
      {absl::OutOfRangeError("prompt too long"), 413, 413},
      {absl::OutOfRangeError("x"), 400, 422},
      {absl::UnauthenticatedError("x"), 401, 401},
      {absl::NotFoundError("x"), 404, 404},
      {absl::ResourceExhaustedError("x"), 429, 429},
      // Issue 14: gRPC's own size refusal is no retry invitation.
      {absl::ResourceExhaustedError("Received message larger than max (5000000 vs. 4194304)"), 413, 413},
      {absl::UnavailableError("x"), 503, 503},
      {absl::DeadlineExceededError("x"), 504, 504},
      {absl::InternalError("x"), 500, 500},
      {absl::UnknownError("x"), 500, 500},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HttpStatusFor(c.status, ApiFlavor::kOpenAI), c.openai) << c.status;
    EXPECT_EQ(HttpStatusFor(c.status, ApiFlavor::kTgi), c.tgi) << c.status;
  }
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full")),
            absl::ResourceExhaustedError("full"));
}

TEST(ApiErrorsTest, ErrorResponsesHaveTheRightShape) {
  http::Response r = ErrorResponse(ApiFlavor::kOpenAI, FieldError("top_p", "must be in (0, 1]"));
  EXPECT_EQ(r.status, 400);
  Json j = Json::parse(r.body);
  EXPECT_EQ(j["error"]["message"], "top_p: must be in (0, 1]");
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["code"].is_null());

  http::Response busy = ErrorResponse(ApiFlavor::kTgi, absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(busy.status, 429);
  bool retry_after = false;
  for (const auto& [k, v] : busy.headers) retry_after |= k == "Retry-After" && v == "1";
  EXPECT_TRUE(retry_after);
  Json t = Json::parse(busy.body);
  EXPECT_EQ(t["error"], "queue full");
  EXPECT_EQ(t["error_type"], "overloaded");
}

}  // namespace
}  // namespace blossom::gateway
