#include "clients/gateway/metrics.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

TEST(GatewayMetricsTest, CountsByRouteAndStatus) {
  GatewayMetrics metrics;
  metrics.RecordRequest("completions", 200);
  metrics.RecordRequest("completions", 200);
  metrics.RecordRequest("generate", 429);
  metrics.AddInFlight(2);
  metrics.AddInFlight(-1);
  metrics.RecordCancelled();
  std::string text = metrics.Text();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE blossom_gateway_requests_total counter\n"));
  EXPECT_TRUE(absl::StrContains(text, "blossom_gateway_requests_total{route=\"completions\",status=\"200\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "blossom_gateway_requests_total{route=\"generate\",status=\"429\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "blossom_gateway_requests_in_flight 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "blossom_gateway_client_disconnects_total 1\n"));
}

TEST(GatewayMetricsTest, CountsStreamErrorsByRouteAndReason) {
  GatewayMetrics metrics;
  metrics.RecordStreamError("completions", GatewayMetrics::StreamError::kBackendError);
  metrics.RecordStreamError("generate_stream", GatewayMetrics::StreamError::kShutdown);
  metrics.RecordStreamError("generate_stream", GatewayMetrics::StreamError::kShutdown);
  const std::string text = metrics.Text();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE blossom_gateway_stream_errors_total counter\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "blossom_gateway_stream_errors_total{route=\"completions\",reason=\"backend_error\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "blossom_gateway_stream_errors_total{route=\"generate_stream\",reason=\"shutdown\"} 2\n"))
      << text;
}

}  // namespace
}  // namespace blossom::gateway
