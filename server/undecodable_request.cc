#include "server/undecodable_request.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/server_context.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The request type's full name, or "" where the generated descriptors do not know `method`.
std::string RequestTypeOf(absl::string_view method) {
  absl::string_view path = absl::StripPrefix(method, "/");
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return "";
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      std::string(path.substr(0, slash)));
  if (service == nullptr) return "";
  const auto* rpc = service->FindMethodByName(std::string(path.substr(slash + 1)));
  return rpc == nullptr ? "" : rpc->input_type()->full_name();
}

class UndecodableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  UndecodableRequestInterceptor(grpc::experimental::ServerRpcInfo* info,
                                const AuthenticateFn* authenticate, ServerMetrics* metrics)
      : info_(info), method_(info->method()), authenticate_(authenticate), metrics_(metrics) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      undecodable_ = true;
    }
    if (undecodable_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      // Authenticated only here, on the rare refusal: the client's metadata is the call's
      // context's from POST_RECV_INITIAL_METADATA on.
      absl::Status status = absl::OkStatus();
      if (*authenticate_) status = (*authenticate_)(info_->server_context()->client_metadata());
      if (status.ok()) status = UndecodableRequestStatus(method_);
      methods->ModifySendStatus(ToGrpcStatus(status));
      if (metrics_ != nullptr && IsGenerationMethod(method_)) {
        metrics_->CountRequest(StatusCodeLabel(status.code()));
      }
      // The method is a registered name (gRPC routed the call by it): safe to log as is.
      spdlog::info("{} refused: {} {}", method_, StatusCodeLabel(status.code()),
                   std::string(status.message()));
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;  // gRPC's, outlives the interceptor
  const char* const method_;  // the registered method's name, which the server owns
  const AuthenticateFn* const authenticate_;  // owned by the factory, which outlives the call
  ServerMetrics* const metrics_;
  bool undecodable_ = false;
};

class UndecodableRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  UndecodableRequestInterceptorFactory(AuthenticateFn authenticate, ServerMetrics* metrics)
      : authenticate_(std::move(authenticate)), metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // Unary methods only (the header says why streams are left alone; for client-streaming and
    // bidi methods a null message is also the stream's normal end).
    if (info->method() == nullptr ||
        info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) {
      return nullptr;
    }
    return new UndecodableRequestInterceptor(info, &authenticate_, metrics_);
  }

 private:
  const AuthenticateFn authenticate_;
  ServerMetrics* const metrics_;
};

}  // namespace

absl::Status UndecodableRequestStatus(absl::string_view method) {
  const std::string type = RequestTypeOf(method);
  return WithReason(
      absl::InvalidArgumentError(absl::StrCat(
          "the request message does not decode as ", type.empty() ? "the method's request" : type,
          ": malformed protobuf, a string field that is not valid UTF-8, or no message")),
      error_reason::kInvalidRequest);
}

bool IsGenerationMethod(absl::string_view method) {
  return method == "/blossom.v1.Blossom/Generate" || method == kGenerateStreamMethod ||
         method == "/blossom.v1.Blossom/BeamSearch";
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
UndecodableRequestInterceptors(AuthenticateFn authenticate, ServerMetrics* metrics) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
  factories.push_back(
      std::make_unique<UndecodableRequestInterceptorFactory>(std::move(authenticate), metrics));
  return factories;
}

}  // namespace blossom
