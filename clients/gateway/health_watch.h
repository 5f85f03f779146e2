// The backend's serving status, followed by one long-lived grpc.health.v1.Health/Watch stream.
#ifndef BLOSSOM_CLIENTS_GATEWAY_HEALTH_WATCH_H_
#define BLOSSOM_CLIENTS_GATEWAY_HEALTH_WATCH_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace blossom::gateway {

// Keeps one Watch stream open for `service` and caches the last status it sent, so readiness
// follows the server within one message (blossom-server sends NOT_SERVING when it starts to
// drain) instead of one probe. When the stream breaks (server gone or restarting) the status is
// kUnknown and a new Watch starts with wait_for_ready: it waits for the channel, which
// reconnects under its own policy (backend_channel.h), so a down backend costs no busy loop.
// A stream that ends without a message (a backend without the health service: kUnimplemented)
// is retried after `retry_delay`.
//
// Thread-safe. The stream is read on a thread of its own with gRPC's synchronous API, so no
// gRPC callback thread ever waits on it. The destructor cancels the stream and joins.
class HealthWatch {
 public:
  enum class Status { kUnknown, kServing, kNotServing, kUnimplemented };

  struct Options {
    std::string service;        // the name whose status is watched ("" = the whole server)
    std::string authorization;  // sent as "authorization" metadata when not empty
    absl::Duration retry_delay = absl::Seconds(1);
  };

  HealthWatch(std::shared_ptr<grpc::ChannelInterface> channel, Options options);
  ~HealthWatch();
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;

  Status status() const;
  // Waits up to `bound` until status() differs from `from`; returns status().
  Status WaitForChange(Status from, absl::Duration bound) const;

 private:
  void Run();
  void Set(Status status);

  const std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  const Options options_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;       // status_ changed or stopping_ set
  Status status_ = Status::kUnknown;              // guarded by mu_
  bool stopping_ = false;                         // guarded by mu_
  grpc::ClientContext* context_ = nullptr;        // guarded by mu_: the stream in flight
  std::thread thread_;                            // last member: started once the rest exists
};

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_HEALTH_WATCH_H_
