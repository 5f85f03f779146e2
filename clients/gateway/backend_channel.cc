#include "clients/gateway/backend_channel.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clients/gateway/credential_files.h"
#include "kernels/status_macros.h"

namespace blossom::gateway {

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
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      BLOSSOM_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                               ReadPemFile("--backend-ca-file", options.ca_file));
    }
    if (!options.cert_file.empty()) {
      BLOSSOM_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                               ReadPemFile("--backend-tls-cert", options.cert_file));
      BLOSSOM_ASSIGN_OR_RETURN(ssl.pem_private_key,
                               ReadPemFile("--backend-tls-key", options.key_file));
    }
    credentials = grpc::SslCredentials(ssl);
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
