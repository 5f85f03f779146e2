// Test helper: a self-signed certificate and its key, made in-process with OpenSSL (EC P-256,
// valid from a minute ago for a day, subject alternative names localhost and 127.0.0.1), so that
// TLS tests need no openssl CLI and can mint as many distinct certificates as they like.
#ifndef BLOSSOM_SERVER_TESTING_SELF_SIGNED_CERT_H_
#define BLOSSOM_SERVER_TESTING_SELF_SIGNED_CERT_H_

#include <string>

namespace blossom::testing {

struct PemPair {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key (PKCS#8, unencrypted)
};

// A new key and certificate whose subject is CN=common_name. Thread-compatible.
PemPair SelfSignedCert(const std::string& common_name);

// Writes `text` to `path`, replacing it. False when the file cannot be written.
bool WriteTextFile(const std::string& path, const std::string& text);

}  // namespace blossom::testing

#endif  // BLOSSOM_SERVER_TESTING_SELF_SIGNED_CERT_H_
