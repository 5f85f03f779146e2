// The gRPC service over loopback for the blossom_service tests: the in-process server with a
// client stub, and a greedy request.
#ifndef BLOSSOM_SERVER_BLOSSOM_SERVICE_TEST_UTIL_H_
#define BLOSSOM_SERVER_BLOSSOM_SERVICE_TEST_UTIL_H_

#include <memory>
#include <string>
#include <utility>

#include "grpcpp/grpcpp.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "server/testing/in_process_server.h"

namespace blossom::testing {

// The real service on loopback with a client stub.
class ServiceFixture : public InProcessServer {
 public:
  explicit ServiceFixture(ServiceOptions options = {}, EngineConfig engine_config = {})
      : InProcessServer(std::move(options), engine_config),
        stub_(v1::Blossom::NewStub(
            grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()))) {}
  v1::Blossom::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<v1::Blossom::Stub> stub_;
};

// Greedy decoding of `max_new_tokens` tokens, EOS ignored: a deterministic request.
inline v1::GenerateRequest Greedy(const std::string& text, int max_new_tokens) {
  v1::GenerateRequest request;
  request.set_text(text);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  request.mutable_stopping()->set_ignore_eos(true);
  return request;
}

}  // namespace blossom::testing

#endif  // BLOSSOM_SERVER_BLOSSOM_SERVICE_TEST_UTIL_H_
