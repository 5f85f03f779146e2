#include "clients/gateway/metrics.h"

#include "absl/strings/str_cat.h"

namespace blossom::gateway {

GatewayMetrics::GatewayMetrics()
    : requests_(registry_.AddCounter("blossom_gateway_requests_total",
                                     "HTTP requests by route and status code.",
                                     {"route", "status"})),
      in_flight_(registry_.AddGauge("blossom_gateway_requests_in_flight",
                                    "Generation requests in progress.")),
      cancelled_(registry_.AddCounter("blossom_gateway_client_disconnects_total",
                                      "Requests cancelled because the client went away.")) {}

void GatewayMetrics::RecordRequest(absl::string_view route, int status) {
  requests_.Get({std::string(route), absl::StrCat(status)}).Increment();
}

}  // namespace blossom::gateway
