// The gateway's tokenizer routes: /tokenize, TGI's or vLLM's by the body's fields (tgi_api.h,
// vllm_api.h), and vLLM's /detokenize, each relayed to the server's Tokenize / Detokenize.
#include <functional>
#include <memory>
#include <utility>

#include "clients/gateway/api_errors.h"
#include "clients/gateway/gateway.h"
#include "clients/gateway/gateway_internal.h"
#include "clients/gateway/json_fields.h"
#include "clients/gateway/tgi_api.h"
#include "clients/gateway/vllm_api.h"

namespace blossom::gateway {

using http::ResponseWriter;

void Gateway::HandleTokenize(const http::Request& request, std::shared_ptr<ResponseWriter> writer) {
  // Which API's body it is decides the request, the error shape and the answer's encoding.
  blossom::v1::TokenizeRequest grpc_request;
  ApiFlavor flavor = ApiFlavor::kTgi;
  std::function<Json(const blossom::v1::TokenizeResponse&)> encode;
  absl::StatusOr<Json> body = ParseJsonObject(request.body);
  if (body.ok() && vllm::IsTokenizeRequest(*body)) {
    absl::StatusOr<vllm::TokenizeCall> parsed =
        vllm::ParseTokenizeRequest(*body, options_.chat_template);
    if (!parsed.ok()) {
      writer->Send(ErrorResponse(ApiFlavor::kOpenAI, parsed.status()));
      return;
    }
    flavor = parsed->chat ? ApiFlavor::kOpenAIChat : ApiFlavor::kOpenAI;
    if (absl::Status served = TakeServedModel(parsed->request.mutable_model()); !served.ok()) {
      writer->Send(ErrorResponse(flavor, served));
      return;
    }
    grpc_request = parsed->request;
    encode = [vllm_call = *std::move(parsed)](const blossom::v1::TokenizeResponse& response) {
      return vllm::TokenizeResponse(vllm_call, response);
    };
  } else {
    absl::StatusOr<blossom::v1::TokenizeRequest> parsed = tgi::ParseTokenizeRequest(request.body);
    if (!parsed.ok()) {
      writer->Send(ErrorResponse(ApiFlavor::kTgi, parsed.status()));
      return;
    }
    grpc_request = *std::move(parsed);
    encode = [input = grpc_request.text()](const blossom::v1::TokenizeResponse& response) {
      return tgi::TokenizeResponse(input, response);
    };
  }
  auto call =
      std::make_shared<UnaryCall<blossom::v1::TokenizeRequest, blossom::v1::TokenizeResponse>>();
  call->request = std::move(grpc_request);
  SetupContext(request, options_.health_timeout, &call->context);
  CallStarted();
  const uint64_t tracked = TrackCall(call);
  stub_->async()->Tokenize(
      &call->context, &call->request, &call->response,
      [this, call, writer, flavor, tracked, encode = std::move(encode)](grpc::Status status) {
        if (!status.ok()) {
          writer->Send(ErrorResponse(flavor, BackendStatus(status)));
        } else {
          writer->Send(JsonResponse(200, encode(call->response)));
        }
        UntrackCancel(tracked);
        CallFinished();
      });
}

void Gateway::HandleDetokenize(const http::Request& request,
                               std::shared_ptr<ResponseWriter> writer) {
  absl::StatusOr<blossom::v1::DetokenizeRequest> parsed =
      vllm::ParseDetokenizeRequest(request.body);
  if (!parsed.ok()) {
    writer->Send(ErrorResponse(ApiFlavor::kOpenAI, parsed.status()));
    return;
  }
  if (absl::Status served = TakeServedModel(parsed->mutable_model()); !served.ok()) {
    writer->Send(ErrorResponse(ApiFlavor::kOpenAI, served));
    return;
  }
  auto call = std::make_shared<
      UnaryCall<blossom::v1::DetokenizeRequest, blossom::v1::DetokenizeResponse>>();
  call->request = std::move(*parsed);
  SetupContext(request, options_.health_timeout, &call->context);
  CallStarted();
  const uint64_t tracked = TrackCall(call);
  stub_->async()->Detokenize(
      &call->context, &call->request, &call->response,
      [this, call, writer, tracked](grpc::Status status) {
        if (!status.ok()) {
          writer->Send(ErrorResponse(ApiFlavor::kOpenAI, BackendStatus(status)));
        } else {
          writer->Send(JsonResponse(200, vllm::DetokenizeResponse(call->response)));
        }
        UntrackCancel(tracked);
        CallFinished();
      });
}

}  // namespace blossom::gateway
