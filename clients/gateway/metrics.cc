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
                                      "Requests cancelled because the client went away.")),
      stream_errors_(registry_.AddCounter(
          "blossom_gateway_stream_errors_total",
          "Streams that ended in an error event after their 200 went out, by route and reason "
          "(backend_error, shutdown).",
          {"route", "reason"})) {
  // Exported (as 0) from the start: an alert on their absence then means a failed scrape, not
  // a gateway that has not served yet.
  in_flight_.Get();
  cancelled_.Get();
}

void GatewayMetrics::RecordStreamError(absl::string_view route, StreamError reason) {
  stream_errors_
      .Get({std::string(route), reason == StreamError::kShutdown ? "shutdown" : "backend_error"})
      .Increment();
}

void GatewayMetrics::RecordRequest(absl::string_view route, int status) {
  requests_.Get({std::string(route), absl::StrCat(status)}).Increment();
}

}  // namespace blossom::gateway
