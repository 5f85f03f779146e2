// LoadClient over Blossom's gRPC API: each request is one GenerateStream call driven by a
// ClientReadReactor on gRPC's callback threads, so thousands of concurrent streams need no
// thread each. Every request is greedy with stopping.ignore_eos, so it produces exactly
// max_new_tokens tokens; the final message's usage gives the server's prompt and output counts.
//
// Thread-safety: Start and Tokenize may be called from any thread. The destructor waits until
// every started stream's reactor has been destroyed.
#ifndef BLOSSOM_BENCHMARKS_GRPC_LOAD_CLIENT_H_
#define BLOSSOM_BENCHMARKS_GRPC_LOAD_CLIENT_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "benchmarks/load_client.h"
#include "grpcpp/grpcpp.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"

namespace blossom {

struct GrpcLoadClientOptions {
  std::string address;  // host:port
  std::string api_key;  // sent as `authorization: Bearer <key>` when set
  std::string model;    // GenerateRequest.model ("" = whatever is served)
  // Each call's whole deadline (GenerateStream: send to the last message); 0 = none.
  double deadline_s = 0;
};

class GrpcLoadClient final : public LoadClient {
 public:
  explicit GrpcLoadClient(GrpcLoadClientOptions options);
  ~GrpcLoadClient() override;

  void Start(const LoadRequest& request, BenchClock::time_point epoch, Done done) override;
  absl::StatusOr<Tokenized> Tokenize(const std::string& text) override;
  bool SupportsTokenIds() const override { return true; }
  absl::StatusOr<v1::ModelInfo> GetModelInfo();

 private:
  class StreamReactor;
  void Decorate(grpc::ClientContext* context) const;
  void StreamFinished();

  const GrpcLoadClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Blossom::Stub> stub_;
  std::mutex mu_;
  std::condition_variable idle_;
  int64_t streams_ = 0;  // started and not yet destroyed; guarded by mu_
};

// "grpc://host:port" -> "host:port"; an error for anything else.
absl::StatusOr<std::string> GrpcAddressFromTarget(const std::string& target);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_GRPC_LOAD_CLIENT_H_
