// Test helper: a grpc.health.v1 service whose Check always answers SERVING, to stand in for a
// backend in client tests (reconnects, TLS) that need a live gRPC server but not the model.
// Watch is left unimplemented (UNIMPLEMENTED), as no client under test calls it.
// Thread-safety: stateless; serves any number of calls at once.
#ifndef BLOSSOM_SERVER_TESTING_FAKE_HEALTH_SERVICE_H_
#define BLOSSOM_SERVER_TESTING_FAKE_HEALTH_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace blossom::testing {

class ServingHealthService : public grpc::health::v1::Health::CallbackService {
 public:
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
};

}  // namespace blossom::testing

#endif  // BLOSSOM_SERVER_TESTING_FAKE_HEALTH_SERVICE_H_
