// The gateway's own Prometheus metrics: requests by route and HTTP status, requests in flight,
// client disconnects, streams that ended in an error event. Rendered by //server/metrics, the server's exposition library.
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
  // Why a stream ended in an error event after it had started: requests_total counted it by
  // its 200, sent before the failure. The reason label has these values only.
  enum class StreamError {
    kBackendError,  // the backend's call failed mid-stream ("backend_error")
    kShutdown,      // the gateway's drain timed out, or a second signal ("shutdown")
  };
  void RecordStreamError(absl::string_view route, StreamError reason);
  // Prometheus text exposition format (version 0.0.4).
  std::string Text() const { return registry_.Render(); }

 private:
  metrics::Registry registry_;
  metrics::Family<metrics::Counter>& requests_;
  metrics::Family<metrics::Gauge>& in_flight_;
  metrics::Family<metrics::Counter>& cancelled_;
  metrics::Family<metrics::Counter>& stream_errors_;
};

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_METRICS_H_
