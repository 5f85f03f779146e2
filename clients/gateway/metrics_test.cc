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

}  // namespace
}  // namespace blossom::gateway
