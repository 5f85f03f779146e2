// The HTTPS server's TLS context, built from PEM files and rebuilt when they change, so that a
// renewed certificate (cert-manager rewriting a mounted Secret, certbot replacing files) is
// served to new connections without a restart, as vLLM's --enable-ssl-refresh and nginx's
// reload do. Connections keep the context they were accepted with (each holds a reference).
//
// A change is noticed by stat() of both files (device, inode, size, modification and status
// change times; through symlinks, so Kubernetes' swap of the `..data` link counts), looked at
// no more often than `check_interval`. A rebuild that fails (a half-written file, a key that
// does not match the certificate mid-rotation) keeps the previous context, logs one warning
// naming the file and the reason, and is tried again only when the files change again.
//
// Protocol floor and ciphers: TLS 1.2 or newer; for TLS 1.2 only ECDHE key exchange with AEAD
// ciphers (AES-GCM, ChaCha20-Poly1305: Mozilla's "intermediate" list without finite-field DHE);
// TLS 1.3 keeps OpenSSL's suites, which are all AEAD.
//
// Not thread-safe: call Current() from one thread (the server's I/O thread).
#ifndef BLOSSOM_SERVER_HTTP_TLS_CONTEXT_H_
#define BLOSSOM_SERVER_HTTP_TLS_CONTEXT_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace blossom::http::internal {

// The TLS 1.2 cipher list (OpenSSL names) every server context is limited to.
extern const char kTls12Ciphers[];

// Configures `tls` for serving with the certificate chain and key in these PEM files.
// InvalidArgument naming the file on any error (unreadable, not PEM, key not matching).
absl::Status ConfigureTls(const std::string& cert_file, const std::string& key_file,
                          boost::asio::ssl::context* tls);

class TlsContextSource {
 public:
  using Clock = std::chrono::steady_clock;

  // Builds the first context; an error here is fatal to the caller (nothing to serve with).
  static absl::StatusOr<std::unique_ptr<TlsContextSource>> Create(
      std::string cert_file, std::string key_file,
      Clock::duration check_interval = std::chrono::seconds(1));

  // The context for a new connection: the files' current contents when they changed since the
  // last look (and at least check_interval has passed) and build cleanly, else the last good one.
  std::shared_ptr<boost::asio::ssl::context> Current();

  // How many times the context was rebuilt after Create (successfully), for tests and logs.
  int64_t reloads() const { return reloads_; }

 private:
  struct FileIdentity {
    dev_t device = 0;
    ino_t inode = 0;
    off_t size = -1;
    int64_t modified_ns = 0;
    int64_t changed_ns = 0;
    bool operator==(const FileIdentity& other) const;
  };
  struct Identity {
    FileIdentity cert, key;
    bool operator==(const Identity& other) const { return cert == other.cert && key == other.key; }
  };

  TlsContextSource(std::string cert_file, std::string key_file, Clock::duration check_interval);
  Identity Look() const;
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> Build() const;

  const std::string cert_file_, key_file_;
  const Clock::duration check_interval_;
  std::shared_ptr<boost::asio::ssl::context> current_;
  Identity seen_;  // what the files were at the last build attempt, good or bad
  Clock::time_point next_check_;
  int64_t reloads_ = 0;
};

}  // namespace blossom::http::internal

#endif  // BLOSSOM_SERVER_HTTP_TLS_CONTEXT_H_
