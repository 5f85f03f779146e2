// A clear refusal for a request message that does not decode.
//
// gRPC's callback handlers (1.51, still so upstream) answer a request whose bytes do not parse
// as the method's message (malformed protobuf, a proto3 string field that is not UTF-8, a call
// half-closed without its message) with UNIMPLEMENTED and an empty message, before the service
// sees the call. UNIMPLEMENTED tells a client the method does not exist, which is false, and
// says nothing of what to fix. The refusal is INVALID_ARGUMENT naming the message type
// (UndecodableRequestStatus), with the ErrorInfo reason INVALID_REQUEST; a client that presents
// no valid API key where keys are required gets the service's UNAUTHENTICATED instead, as for
// any other call, so the answer reveals nothing to it. A generation RPC refused so counts in
// blossom_requests_total{outcome="invalid_argument"} like the service's own refusals.
//
// Two ways, by cost. For unary methods, a server interceptor (UndecodableRequestInterceptors)
// notices the failed decode (gRPC hands interceptors a null message at POST_RECV_MESSAGE) and
// rewrites that status at PRE_SEND_STATUS: a unary call has a handful of operations, so the
// interceptor's extra core batch per operation costs nothing that matters. A server-streaming
// call would pay it on every streamed token, so GenerateStream is a raw method that parses its
// own bytes instead (BlossomService::GenerateStream) and answers the same way, in the same order:
// the key, then the bytes, then the server's state (a loading or draining server still answers
// INVALID_ARGUMENT for bytes no retry could make decode). Other streaming methods are never
// intercepted (grpc.health.v1's Watch keeps gRPC's answers).
//
// Thread-safety: the factory is called concurrently by gRPC; each interceptor belongs to one call
// and sets its state in the batch that receives the message, before the status is sent.
#ifndef BLOSSOM_SERVER_UNDECODABLE_REQUEST_H_
#define BLOSSOM_SERVER_UNDECODABLE_REQUEST_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/string_ref.h"
#include "server/server_metrics.h"

namespace blossom {

using ClientMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// What the service answers a call with this metadata on authentication alone: OK, or its
// UNAUTHENTICATED refusal. Called on gRPC's threads; must be thread-safe.
using AuthenticateFn = std::function<absl::Status(const ClientMetadata& metadata)>;

// The INVALID_ARGUMENT status for a request to `method` ("/package.Service/Method") that did not
// decode: names the request type where the descriptor pool knows the method.
absl::Status UndecodableRequestStatus(absl::string_view method);

// The path of blossom.v1.Blossom's GenerateStream, which parses its own request bytes.
inline constexpr char kGenerateStreamMethod[] = "/blossom.v1.Blossom/GenerateStream";

// Whether `method` is one of the generation RPCs counted in blossom_requests_total.
bool IsGenerationMethod(absl::string_view method);

// The interceptor factories to pass to ServerBuilder::experimental().SetInterceptorCreators.
// `authenticate` may be empty (no authentication); `metrics` may be null and must outlive the
// server.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
UndecodableRequestInterceptors(AuthenticateFn authenticate, ServerMetrics* metrics);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_UNDECODABLE_REQUEST_H_
