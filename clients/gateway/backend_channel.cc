#include "clients/gateway/backend_channel.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      std::ifstream in(options.ca_file, std::ios::binary);
      if (!in) {
        return absl::InvalidArgumentError(absl::StrCat("cannot read CA file ", options.ca_file));
      }
      ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (ssl.pem_root_certs.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("CA file ", options.ca_file, " is empty"));
      }
    }
    credentials = grpc::SslCredentials(ssl);
  } else if (!options.ca_file.empty()) {
    return absl::InvalidArgumentError("a CA file needs TLS (--backend-tls)");
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
