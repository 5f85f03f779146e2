#include "clients/gateway/backend_channel.h"

#include <algorithm>
#include <memory>
#include <string>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clients/gateway/credential_files.h"
#include "kernels/status_macros.h"
#include "server/auth/tls_credentials.h"

namespace blossom::gateway {
namespace {

// How often gRPC's file watcher re-reads the CA, certificate and key files: every second, as
// blossom-server's own (server/auth/tls_credentials.h says why so often).
constexpr unsigned int kTlsRefreshIntervalS = 1;

// TLS credentials that follow their files: gRPC's FileWatcherCertificateProvider re-reads the CA,
// certificate and key every kTlsRefreshIntervalS and new connections use what changed (a file
// that does not load keeps the previous material, with gRPC's log line), so a renewed client
// certificate or CA (cert-manager rewriting a mounted Secret) needs no restart. Connections
// already open keep the credentials they were made with.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(
    const BackendChannelOptions& options) {
  if (!options.ca_file.empty()) {
    BLOSSOM_RETURN_IF_ERROR(ReadPemFile("--backend-ca-file", options.ca_file).status());
  }
  if (!options.cert_file.empty()) {
    BLOSSOM_RETURN_IF_ERROR(ReadPemFile("--backend-tls-cert", options.cert_file).status());
    BLOSSOM_RETURN_IF_ERROR(ReadPemFile("--backend-tls-key", options.key_file).status());
  }
  // What gRPC's file watcher would only log, handshake after handshake (a CA file without a
  // certificate, a chain that does not load, a key that is not its key), stops the start here.
  BLOSSOM_RETURN_IF_ERROR(CheckPemFiles({"--backend-tls-cert", options.cert_file},
                                        {"--backend-tls-key", options.key_file},
                                        {"--backend-ca-file", options.ca_file}));
  grpc::experimental::TlsChannelCredentialsOptions tls;
  // Roots not watched are the system roots (as SslCredentials without pem_root_certs); with no
  // file at all there is no provider, and no client certificate.
  if (!options.ca_file.empty() || !options.cert_file.empty()) {
    tls.set_certificate_provider(
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            options.key_file, options.cert_file, options.ca_file, kTlsRefreshIntervalS));
    if (!options.ca_file.empty()) tls.watch_root_certs();
    if (!options.cert_file.empty()) tls.watch_identity_key_cert_pairs();
  }
  // The server's certificate chain is verified, and its name against the target's host (a DNS
  // name or an IP address), as SslCredentials did. Both are the defaults, set here so that no
  // change of default turns them off unnoticed.
  tls.set_verify_server_certs(true);
  tls.set_check_call_host(true);
  return grpc::experimental::TlsCredentials(tls);
}

}  // namespace

grpc::ChannelArguments BackendChannelArguments(const BackendChannelOptions& options) {
  grpc::ChannelArguments args;
  const int max_ms = std::max(100, options.max_reconnect_backoff_ms);
  const int initial_ms = std::min(250, max_ms);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  args.SetMaxReceiveMessageSize(-1);
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeBackendChannel(
    const BackendChannelOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--backend-tls-cert and --backend-tls-key go together (a client certificate is "
        "useless without its key)");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls) {
    BLOSSOM_ASSIGN_OR_RETURN(credentials, TlsCredentials(options));
  } else if (!options.ca_file.empty() || !options.cert_file.empty()) {
    // Plaintext would ignore them: the operator meant TLS.
    return absl::InvalidArgumentError(absl::StrCat(
        options.ca_file.empty() ? "--backend-tls-cert" : "--backend-ca-file",
        " needs TLS (--backend-tls)"));
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(options.target, credentials, BackendChannelArguments(options));
}

void ReconnectNowIfFailing(grpc::ChannelInterface* channel) {
  auto* real = dynamic_cast<grpc::Channel*>(channel);
  if (real == nullptr) return;
  const grpc_connectivity_state state = real->GetState(/*try_to_connect=*/true);
  if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) grpc::experimental::ChannelResetConnectionBackoff(real);
}

}  // namespace blossom::gateway
