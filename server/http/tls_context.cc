#include "server/http/tls_context.h"

#include <openssl/ssl.h>
#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace blossom::http::internal {

const char kTls12Ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

absl::Status ConfigureTls(const std::string& cert_file, const std::string& key_file,
                          boost::asio::ssl::context* tls) {
  using boost::asio::ssl::context;
  boost::system::error_code ec;
  tls->set_options(context::default_workarounds | context::no_sslv2 | context::no_sslv3 |
                       context::no_tlsv1 | context::no_tlsv1_1 | context::single_dh_use,
                   ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot set TLS options: ", ec.message()));
  if (SSL_CTX_set_cipher_list(tls->native_handle(), kTls12Ciphers) != 1) {
    return absl::InternalError("this OpenSSL has none of the TLS 1.2 AEAD ciphers");
  }
  tls->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load TLS certificate ", cert_file, ": ", ec.message()));
  }
  // Asio checks the key against the certificate (SSL_CTX_use_PrivateKey fails on a mismatch).
  tls->use_private_key_file(key_file, context::pem, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load TLS key ", key_file, ": ", ec.message()));
  }
  return absl::OkStatus();
}

bool TlsContextSource::FileIdentity::operator==(const FileIdentity& other) const {
  return device == other.device && inode == other.inode && size == other.size &&
         modified_ns == other.modified_ns && changed_ns == other.changed_ns;
}

TlsContextSource::TlsContextSource(std::string cert_file, std::string key_file,
                                   Clock::duration check_interval)
    : cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)),
      check_interval_(check_interval) {}

absl::StatusOr<std::unique_ptr<TlsContextSource>> TlsContextSource::Create(
    std::string cert_file, std::string key_file, Clock::duration check_interval) {
  std::unique_ptr<TlsContextSource> source(
      new TlsContextSource(std::move(cert_file), std::move(key_file), check_interval));
  source->seen_ = source->Look();
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> built = source->Build();
  if (!built.ok()) return built.status();
  source->current_ = std::move(*built);
  source->next_check_ = Clock::now() + check_interval;
  return source;
}

TlsContextSource::Identity TlsContextSource::Look() const {
  auto look = [](const std::string& path) {
    FileIdentity id;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return id;  // gone: size -1 until it is back
    id.device = st.st_dev;
    id.inode = st.st_ino;
    id.size = st.st_size;
    id.modified_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    id.changed_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
    return id;
  };
  return Identity{look(cert_file_), look(key_file_)};
}

absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> TlsContextSource::Build() const {
  auto tls = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_server);
  if (absl::Status status = ConfigureTls(cert_file_, key_file_, tls.get()); !status.ok()) {
    return status;
  }
  return tls;
}

std::shared_ptr<boost::asio::ssl::context> TlsContextSource::Current() {
  const Clock::time_point now = Clock::now();
  if (now < next_check_) return current_;
  next_check_ = now + check_interval_;
  // Looked at before the build: a file rewritten while it is read differs at the next look.
  const Identity identity = Look();
  if (identity == seen_) return current_;
  seen_ = identity;
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> built = Build();
  if (!built.ok()) {
    spdlog::warn("https: the certificate files changed but do not load ({}); still serving "
                    "the previous certificate",
                    std::string(built.status().message()));
    return current_;
  }
  current_ = std::move(*built);
  ++reloads_;
  spdlog::info("https: reloaded the certificate from {} and {}", cert_file_, key_file_);
  return current_;
}

}  // namespace blossom::http::internal
