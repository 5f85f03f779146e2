#include "server/testing/fake_health_service.h"

namespace blossom::testing {

grpc::ServerUnaryReactor* ServingHealthService::Check(
    grpc::CallbackServerContext* context, const grpc::health::v1::HealthCheckRequest* /*request*/,
    grpc::health::v1::HealthCheckResponse* response) {
  response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace blossom::testing
