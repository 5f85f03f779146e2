#include "server/grpc_status.h"

#include <string>

#include "absl/strings/cord.h"
#include "gtest/gtest.h"
#include "proto/google/rpc/error_details.pb.h"
#include "proto/google/rpc/status.pb.h"
#include "server/status_details.h"

namespace blossom {
namespace {

TEST(GrpcStatusTest, CodeAndMessageSurviveTheEdge) {
  grpc::Status s = ToGrpcStatus(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "queue full");
  EXPECT_TRUE(s.error_details().empty());  // nothing structured to send
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, LongMessagesAreCut) {
  grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError(std::string(5000, 'm')));
  EXPECT_EQ(s.error_message().size(), kMaxStatusMessageBytes + 3);
}

// What a standard client sees in grpc-status-details-bin: a google.rpc.Status whose details
// are Any-packed BadRequest / ErrorInfo / RetryInfo.
TEST(GrpcStatusTest, DetailsBecomeAGoogleRpcStatus) {
  absl::Status s = WithRetryDelay(
      WithReason(absl::ResourceExhaustedError("waiting queue is full"), error_reason::kQueueFull),
      absl::Seconds(2));
  s.SetPayload("type.blossom.dev/internal", absl::Cord("not for clients"));
  grpc::Status g = ToGrpcStatus(s);
  google::rpc::Status rpc;
  ASSERT_TRUE(rpc.ParseFromString(g.error_details()));
  EXPECT_EQ(rpc.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(rpc.message(), "waiting queue is full");
  ASSERT_EQ(rpc.details_size(), 2);  // the internal payload is not sent
  bool saw_info = false, saw_retry = false;
  for (const google::protobuf::Any& any : rpc.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::RetryInfo retry;
    if (any.UnpackTo(&info) && any.type_url() == kErrorInfoTypeUrl) {
      saw_info = true;
      EXPECT_EQ(info.reason(), "QUEUE_FULL");
      EXPECT_EQ(info.domain(), "blossom.dev");
    } else if (any.UnpackTo(&retry)) {
      saw_retry = true;
      EXPECT_EQ(retry.retry_delay().seconds(), 2);
    }
  }
  EXPECT_TRUE(saw_info);
  EXPECT_TRUE(saw_retry);
}

TEST(GrpcStatusTest, DetailsRoundTrip) {
  absl::Status s = WithReason(
      WithFieldViolation(absl::OutOfRangeError("prompt is too long"), "text", "4000 tokens"),
      error_reason::kPromptTooLong);
  absl::Status back = FromGrpcStatus(ToGrpcStatus(s));
  EXPECT_EQ(back.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(back.message(), "prompt is too long");
  StatusDetails d = DetailsOf(back);
  EXPECT_EQ(d.field, "text");
  EXPECT_EQ(d.field_description, "4000 tokens");
  EXPECT_EQ(d.reason, "PROMPT_TOO_LONG");
}

TEST(GrpcStatusTest, GarbageDetailsAreDroppedButTheStatusArrives) {
  absl::Status back = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "loading", std::string("\xff\x01garbage")));
  EXPECT_EQ(back.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(back.message(), "loading");
  EXPECT_TRUE(DetailsOf(back).reason.empty());
}

}  // namespace
}  // namespace blossom
