#include "server/status_details.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(StatusDetailsTest, DetailsRoundTripThroughPayloads) {
  absl::Status s = WithReason(
      WithFieldViolation(absl::InvalidArgumentError("top_p must be in (0, 1], got 2"),
                         "sampling.top_p", "must be in (0, 1], got 2"),
      error_reason::kInvalidSamplingParams);
  StatusDetails d = DetailsOf(s);
  EXPECT_EQ(d.field, "sampling.top_p");
  EXPECT_EQ(d.field_description, "must be in (0, 1], got 2");
  EXPECT_EQ(d.reason, "INVALID_SAMPLING_PARAMS");
  EXPECT_EQ(d.domain, kErrorDomain);
  EXPECT_FALSE(d.retry_delay.has_value());
  // Code and message are untouched.
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "top_p must be in (0, 1], got 2");
}

TEST(StatusDetailsTest, RetryDelayKeepsSubSecondPrecision) {
  absl::Status s = WithRetryDelay(absl::ResourceExhaustedError("queue full"),
                                  absl::Milliseconds(1500));
  StatusDetails d = DetailsOf(s);
  ASSERT_TRUE(d.retry_delay.has_value());
  EXPECT_EQ(*d.retry_delay, absl::Milliseconds(1500));
  EXPECT_TRUE(d.field.empty());
  EXPECT_TRUE(d.reason.empty());
}

TEST(StatusDetailsTest, LaterReasonReplacesEarlierAndViolationsAccumulate) {
  absl::Status s = WithFieldViolation(absl::InvalidArgumentError("x"), "a", "first");
  s = WithFieldViolation(s, "b", "second");
  s = WithReason(WithReason(s, "FIRST"), "SECOND");
  StatusDetails d = DetailsOf(s);
  EXPECT_EQ(d.field, "a");  // the first violation is the one reported
  EXPECT_EQ(d.reason, "SECOND");
}

TEST(StatusDetailsTest, LongClientTextIsBoundedAtACharacterBoundary) {
  std::string field(kMaxDetailBytes - 1, 'x');
  field += "\xc3\xa9\xc3\xa9";  // "éé": the cut falls inside the first one
  StatusDetails d = DetailsOf(WithFieldViolation(absl::InvalidArgumentError("x"), field, "d"));
  EXPECT_EQ(d.field, std::string(kMaxDetailBytes - 1, 'x') + "...");
}

TEST(StatusDetailsTest, OkStaysOkAndPlainStatusesHaveNoDetails) {
  EXPECT_TRUE(WithReason(absl::OkStatus(), "X").ok());
  EXPECT_TRUE(WithFieldViolation(absl::OkStatus(), "f", "d").ok());
  EXPECT_TRUE(WithRetryDelay(absl::OkStatus(), absl::Seconds(1)).ok());
  StatusDetails d = DetailsOf(absl::InternalError("boom"));
  EXPECT_TRUE(d.field.empty());
  EXPECT_TRUE(d.reason.empty());
  EXPECT_FALSE(d.retry_delay.has_value());
  // A corrupt payload is ignored, not trusted.
  absl::Status corrupt = absl::InvalidArgumentError("x");
  corrupt.SetPayload(kErrorInfoTypeUrl, absl::Cord("\xff\xff\xff"));
  EXPECT_TRUE(DetailsOf(corrupt).reason.empty());
}

}  // namespace
}  // namespace blossom
