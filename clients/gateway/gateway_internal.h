// Pieces shared by the gateway's translation units (gateway.cc: routing, auth, health, model
// info; gateway_generation.cc: the generation routes; gateway_tokenize.cc: /tokenize and
// /detokenize). Not part of the public API.
#ifndef BLOSSOM_CLIENTS_GATEWAY_GATEWAY_INTERNAL_H_
#define BLOSSOM_CLIENTS_GATEWAY_GATEWAY_INTERNAL_H_

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clients/gateway/gateway.h"
#include "clients/gateway/json_fields.h"
#include "grpcpp/grpcpp.h"
#include "server/http/http_server.h"

namespace blossom::gateway {

// One unary gRPC call's state, kept alive by its callback.
template <typename Req, typename Resp>
struct Gateway::UnaryCall {
  grpc::ClientContext context;
  Req request;
  Resp response;
};

inline http::Response JsonResponse(int status, const Json& body) {
  return http::Response{status, {{"Content-Type", "application/json"}}, Dump(body)};
}
// For a body whose key order is part of the API (the OpenAI responses' top_logprobs).
inline http::Response JsonResponse(int status, const OrderedJson& body) {
  return http::Response{status, {{"Content-Type", "application/json"}}, Dump(body)};
}

inline int64_t UnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_GATEWAY_INTERNAL_H_
