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

absl::Status Refused(const PemFlag& file, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(file.flag, " ", file.path, ": ", what, " (", OpenSslError(), ")"));
}

}  // namespace

absl::Status CheckPemFiles(const PemFlag& cert, const PemFlag& key, const PemFlag& ca) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_method()),
                                                             SSL_CTX_free);
  if (context == nullptr) return absl::InternalError("OpenSSL cannot make a TLS context");
  ERR_clear_error();
  if (!cert.path.empty()) {
    if (SSL_CTX_use_certificate_chain_file(context.get(), cert.path.c_str()) != 1) {
      return Refused(cert, "cannot load a PEM certificate chain");
    }
    // Loading the key also checks it against the certificate.
    if (SSL_CTX_use_PrivateKey_file(context.get(), key.path.c_str(), SSL_FILETYPE_PEM) != 1) {
      return Refused(key, absl::StrCat("cannot load the PEM private key of ", cert.flag));
    }
  }
  if (!ca.path.empty() &&
      SSL_CTX_load_verify_locations(context.get(), ca.path.c_str(), nullptr) != 1) {
    return Refused(ca, "cannot load PEM CA certificates");
  }
  return absl::OkStatus();
}

absl::Status CheckServerTlsFiles(const ServerTlsFiles& files) {
  return CheckPemFiles({"--tls_cert", files.cert}, {"--tls_key", files.key},
                       {"--tls_client_ca", files.client_ca});
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
