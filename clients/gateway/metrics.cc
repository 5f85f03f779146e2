#include "clients/gateway/metrics.h"

#include "absl/strings/str_cat.h"

namespace blossom::gateway {

void GatewayMetrics::RecordRequest(absl::string_view route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{std::string(route), status}];
}

std::string GatewayMetrics::Text() const {
  std::string out =
      "# HELP blossom_gateway_requests_total HTTP requests by route and status code.\n"
      "# TYPE blossom_gateway_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, count] : requests_) {
      absl::StrAppend(&out, "blossom_gateway_requests_total{route=\"", key.first, "\",status=\"",
                      key.second, "\"} ", count, "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP blossom_gateway_requests_in_flight Generation requests in progress.\n"
                  "# TYPE blossom_gateway_requests_in_flight gauge\n"
                  "blossom_gateway_requests_in_flight ", in_flight_.load(), "\n",
                  "# HELP blossom_gateway_client_disconnects_total Requests cancelled because "
                  "the client went away.\n"
                  "# TYPE blossom_gateway_client_disconnects_total counter\n"
                  "blossom_gateway_client_disconnects_total ", cancelled_.load(), "\n");
  return out;
}

}  // namespace blossom::gateway
