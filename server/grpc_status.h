// The one place where absl::Status becomes a gRPC status and back (the gRPC edge of the server
// and of the gateway). Status payloads whose key is a "type.googleapis.com/" type URL (the
// details of //server:status_details) travel as google.rpc.Status.details in the
// `grpc-status-details-bin` trailer, which standard gRPC clients decode (grpcio-status,
// grpc-go's status.FromError, ...).
#ifndef BLOSSOM_SERVER_GRPC_STATUS_H_
#define BLOSSOM_SERVER_GRPC_STATUS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace blossom {

// Longest message of a status sent to a client (ToGrpcStatus cuts longer ones).
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// Same code (absl and gRPC share the canonical codes), the message cut to
// kMaxStatusMessageBytes, and the google.rpc details serialized as binary error details.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The reverse: code, message, and every google.rpc.Status detail as a payload keyed by its type
// URL. Unparsable details are dropped (the code and message still arrive).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_GRPC_STATUS_H_
