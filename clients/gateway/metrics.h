// The gateway's own Prometheus metrics: requests by route and HTTP status, requests in flight,
// client disconnects. Rendered by //server/metrics, the server's exposition library.
#ifndef BLOSSOM_CLIENTS_GATEWAY_METRICS_H_
#define BLOSSOM_CLIENTS_GATEWAY_METRICS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "server/metrics/metrics.h"

namespace blossom::gateway {

// Thread-safe.
class GatewayMetrics {
 public:
  GatewayMetrics();
  GatewayMetrics(const GatewayMetrics&) = delete;
  GatewayMetrics& operator=(const GatewayMetrics&) = delete;

  // route should be a fixed route name (not the raw path) to keep label cardinality bounded.
  void RecordRequest(absl::string_view route, int status);
  void AddInFlight(int delta) { in_flight_.Get().Add(delta); }
  void RecordCancelled() { cancelled_.Get().Increment(); }
  // Prometheus text exposition format (version 0.0.4).
  std::string Text() const { return registry_.Render(); }

 private:
  metrics::Registry registry_;
  metrics::Family<metrics::Counter>& requests_;
  metrics::Family<metrics::Gauge>& in_flight_;
  metrics::Family<metrics::Counter>& cancelled_;
};

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_METRICS_H_
