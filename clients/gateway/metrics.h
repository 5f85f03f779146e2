// The gateway's own Prometheus metrics: requests by route and HTTP status, requests in flight.
#ifndef BLOSSOM_CLIENTS_GATEWAY_METRICS_H_
#define BLOSSOM_CLIENTS_GATEWAY_METRICS_H_

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace blossom::gateway {

// Thread-safe.
class GatewayMetrics {
 public:
  // route should be a fixed route name (not the raw path) to keep label cardinality bounded.
  void RecordRequest(absl::string_view route, int status);
  void AddInFlight(int delta) { in_flight_ += delta; }
  void RecordCancelled() { ++cancelled_; }
  // Prometheus text exposition format (version 0.0.4).
  std::string Text() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // guarded by mu_
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> cancelled_{0};
};

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_METRICS_H_
