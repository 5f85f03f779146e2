// Test helper for mutual TLS: a throw-away CA, a server certificate for localhost and 127.0.0.1,
// and a client certificate, both signed by the CA, made once per test binary in $TEST_TMPDIR
// with the openssl CLI (as //server/http:http_server_tls_test makes its certificate); and a
// gRPC server credential that requires a client certificate signed by that CA, as
// blossom-server --tls_client_ca does.
#ifndef BLOSSOM_CLIENTS_GATEWAY_TEST_CERTS_H_
#define BLOSSOM_CLIENTS_GATEWAY_TEST_CERTS_H_

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace blossom::gateway::testing {

// Paths of the PEM files.
struct TestCerts {
  std::string ca;
  std::string server_cert, server_key;
  std::string client_cert, client_key;

  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // Server credentials that present server_cert and require a client certificate the CA signed.
  std::shared_ptr<grpc::ServerCredentials> MutualTlsServerCredentials() const {
    grpc::SslServerCredentialsOptions options(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_root_certs = Read(ca);
    options.pem_key_cert_pairs.push_back({Read(server_key), Read(server_cert)});
    return grpc::SslServerCredentials(options);
  }
};

inline const TestCerts& MakeTestCerts() {
  static const TestCerts* certs = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/blossom_test_certs");
    auto* c = new TestCerts{dir + "/ca.pem",     dir + "/server.pem", dir + "/server.key",
                            dir + "/client.pem", dir + "/client.key"};
    std::string script = absl::StrCat(
        "set -e; mkdir -p ", dir, "; cd ", dir,
        "; openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=blossom-test-ca "
        "-keyout ca.key -out ca.pem"
        "; echo 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.cnf");
    for (const char* name : {"server", "client"}) {
      absl::StrAppend(&script, "; openssl req -newkey rsa:2048 -nodes -subj /CN=", name,
                      " -keyout ", name, ".key -out ", name, ".csr",
                      "; openssl x509 -req -in ", name, ".csr -CA ca.pem -CAkey ca.key "
                      "-CAcreateserial -days 1 -extfile san.cnf -out ", name, ".pem");
    }
    const std::string command = absl::StrCat("sh -c \"", script, "\" >/dev/null 2>&1");
    EXPECT_EQ(std::system(command.c_str()), 0) << "needs the openssl CLI: " << command;
    return c;
  }();
  return *certs;
}

}  // namespace blossom::gateway::testing

#endif  // BLOSSOM_CLIENTS_GATEWAY_TEST_CERTS_H_
