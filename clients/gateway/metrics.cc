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
                                      "Requests cancelled because the client went away.")) {
  // Exported (as 0) from the start: an alert on their absence then means a failed scrape, not
  // a gateway that has not served yet.
  in_flight_.Get();
  cancelled_.Get();
}

void GatewayMetrics::RecordRequest(absl::string_view route, int status) {
  requests_.Get({std::string(route), absl::StrCat(status)}).Increment();
}

}  // namespace blossom::gateway
