// The gateway's gRPC channel to the Blossom server: credentials (plaintext, TLS, or mutual TLS
// with a client certificate) and the reconnect policy. TLS files are followed: a renewed CA,
// certificate or key is used by new connections within about a second, without a restart (as
// blossom-server follows its own: server/auth/tls_credentials.h).
#ifndef BLOSSOM_CLIENTS_GATEWAY_BACKEND_CHANNEL_H_
#define BLOSSOM_CLIENTS_GATEWAY_BACKEND_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace blossom::gateway {

struct BackendChannelOptions {
  std::string target;  // host:port
  bool tls = false;
  std::string ca_file;  // PEM roots for TLS; empty: the system roots
  // A client certificate chain and its private key (PEM), presented to a server that requires
  // one (blossom-server --tls_client_ca): both or neither, and only with TLS.
  std::string cert_file;
  std::string key_file;
  // Upper bound of gRPC's reconnect backoff. gRPC's default grows to 120 s, so after an outage
  // of a few minutes a restarted server stayed unreachable for up to that long (issue 14).
  int max_reconnect_backoff_ms = 1000;
};

// The channel arguments: reconnect backoff starting at 250 ms (gRPC: 1 s) and capped at
// max_reconnect_backoff_ms, so a restarted backend is found within about that long; and no
// limit on a received message (gRPC: 4 MiB): the server is trusted, and a unary answer with
// top-20 logprobs for a few thousand tokens passes 4 MiB, which gRPC would fail as
// RESOURCE_EXHAUSTED, a 429 that invites retrying a request that can never succeed.
grpc::ChannelArguments BackendChannelArguments(const BackendChannelOptions& options);

// A channel to options.target. InvalidArgument (naming the gateway's flag and the file) when a
// CA, certificate or key file cannot be read or is empty, holds no PEM certificate (CA, chain)
// or key, or the key is not the certificate's; when only one of cert_file and key_file is
// given, or when either of them or ca_file is given without tls. With tls, gRPC's
// FileWatcherCertificateProvider re-reads the given files every second (a file that does not
// load keeps the previous material; a certificate and key replaced one after the other may be
// paired wrongly until the next look); the server's certificate must name the target's host (a
// DNS name or an IP address in its subject alternative names).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeBackendChannel(
    const BackendChannelOptions& options);

// Makes a channel waiting out its reconnect backoff try again now (a health probe calls it, so
// a readiness check never reports a recovered backend as down). No-op on other channels.
void ReconnectNowIfFailing(grpc::ChannelInterface* channel);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_BACKEND_CHANNEL_H_
