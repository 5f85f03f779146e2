// gRPC server credentials from PEM files that follow the files: a renewed certificate, key or
// client CA (cert-manager rewriting a mounted Secret) is used for new connections without a
// restart, through gRPC's FileWatcherCertificateProvider: it re-reads the files every
// `refresh_interval_s` and swaps them in when they changed and read cleanly (a file it cannot
// read or parse keeps the previous material, with gRPC's log line).
//
// Unlike the HTTPS side (server/http/tls_context.h), gRPC 1.51 does not check that a re-read key
// belongs to the re-read certificate: files replaced one after the other (certbot re-pointing its
// live/ links, a hand copy) can pair the new certificate with the old key until the next look,
// and handshakes in that window fail. Hence the short default interval (1 s); files swapped
// together (a Kubernetes Secret volume's ..data link) are never seen half-renewed.
//
// Because gRPC only logs files it cannot use, the files are checked here first, once, so that a
// wrong path, a non-PEM file or a key that does not belong to the certificate stops the server at
// start with an error naming the flag and the file, instead of failing every handshake later.
#ifndef BLOSSOM_SERVER_AUTH_TLS_CREDENTIALS_H_
#define BLOSSOM_SERVER_AUTH_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace blossom {

struct ServerTlsFiles {
  std::string cert;       // PEM certificate chain (--tls_cert)
  std::string key;        // PEM private key of cert (--tls_key)
  std::string client_ca;  // PEM CA bundle (--tls_client_ca): when set, clients must present a
                          // certificate it signed (mutual TLS)
};

// A PEM file and the flag that named it ("--tls_cert"), for errors.
struct PemFlag {
  const char* flag;
  std::string path;
};

// OK when `cert` (if its path is set) loads as a certificate chain and `key` as its private key
// (OpenSSL checks the two belong together), and `ca` (if set) holds at least one certificate;
// else InvalidArgument "<flag> <path>: <what> (<OpenSSL's reason>)". For the server's files and
// the gateway's client certificate alike.
absl::Status CheckPemFiles(const PemFlag& cert, const PemFlag& key, const PemFlag& ca);

// CheckPemFiles on --tls_cert, --tls_key and --tls_client_ca.
absl::Status CheckServerTlsFiles(const ServerTlsFiles& files);

// CheckServerTlsFiles, then credentials that re-read the files every refresh_interval_s.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const ServerTlsFiles& files, unsigned int refresh_interval_s = 1);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_AUTH_TLS_CREDENTIALS_H_
