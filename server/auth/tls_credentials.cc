#include "server/auth/tls_credentials.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/str_cat.h"

namespace blossom {
namespace {

// The first queued OpenSSL error, as text ("" when none), clearing the queue.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::Status Refused(const char* flag, const std::string& path, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " ", path, ": ", what, " (", OpenSslError(), ")"));
}

}  // namespace

absl::Status CheckServerTlsFiles(const ServerTlsFiles& files) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_server_method()),
                                                             SSL_CTX_free);
  if (context == nullptr) return absl::InternalError("OpenSSL cannot make a TLS context");
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(context.get(), files.cert.c_str()) != 1) {
    return Refused("tls_cert", files.cert, "cannot load a PEM certificate chain");
  }
  // Loading the key also checks it against the certificate.
  if (SSL_CTX_use_PrivateKey_file(context.get(), files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return Refused("tls_key", files.key, "cannot load the PEM private key of --tls_cert");
  }
  if (!files.client_ca.empty() &&
      SSL_CTX_load_verify_locations(context.get(), files.client_ca.c_str(), nullptr) != 1) {
    return Refused("tls_client_ca", files.client_ca, "cannot load PEM CA certificates");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const ServerTlsFiles& files, unsigned int refresh_interval_s) {
  if (absl::Status status = CheckServerTlsFiles(files); !status.ok()) return status;
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.client_ca, refresh_interval_s);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files.client_ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace blossom
