// The gRPC server's TLS files: checked at start (errors name the flag and the file), and
// followed afterwards: a renewed certificate and a renewed client CA reach new connections
// without a restart. A real gRPC server on loopback with a health service; each check dials a
// new channel (a distinct channel argument keeps gRPC from reusing a subchannel, and so an
// older handshake).
#include "server/auth/tls_credentials.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/testing/fake_health_service.h"
#include "server/testing/self_signed_cert.h"

namespace blossom {
namespace {

using ::blossom::testing::PemPair;
using ::blossom::testing::SelfSignedCert;
using ::blossom::testing::WriteTextFile;

class TlsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    base_ = absl::StrCat(dir ? dir : "/tmp", "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    files_ = {base_ + "_cert.pem", base_ + "_key.pem", ""};
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  void Install(const PemPair& pem) {
    ASSERT_TRUE(WriteTextFile(files_.cert, pem.cert));
    ASSERT_TRUE(WriteTextFile(files_.key, pem.key));
  }

  void Start() {
    auto credentials = ServerTlsCredentials(files_, /*refresh_interval_s=*/1);
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", *credentials, &port_);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  // A health check over a new TLS connection that trusts `roots` and presents `client` (when
  // it has a certificate). The server certificate's common name, or "" when the call failed.
  std::string ServedName(const std::string& roots, const PemPair& client = {}) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = roots;
    ssl.pem_cert_chain = client.cert;
    ssl.pem_private_key = client.key;
    grpc::ChannelArguments args;
    args.SetInt("blossom.test.connection", ++connections_);
    auto channel = grpc::CreateCustomChannel(absl::StrCat("localhost:", port_),
                                             grpc::SslCredentials(ssl), args);
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    if (!stub->Check(&context, request, &response).ok()) return "";
    const std::vector<grpc::string_ref> names =
        context.auth_context()->FindPropertyValues("x509_common_name");
    return names.empty() ? "(no name)" : std::string(names[0].data(), names[0].size());
  }

  // ServedName until it is `want` or `seconds` have passed (the files are re-read every second).
  std::string ServedNameWithin(int seconds, const std::string& want, const std::string& roots,
                               const PemPair& client = {}) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    std::string name = ServedName(roots, client);
    while (name != want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      name = ServedName(roots, client);
    }
    return name;
  }

  std::string base_;
  ServerTlsFiles files_;
  int port_ = 0;
  int connections_ = 0;
  testing::ServingHealthService health_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TlsCredentialsTest, ARenewedCertificateIsServedWithoutARestart) {
  const PemPair first = SelfSignedCert("first");
  const PemPair second = SelfSignedCert("second-name");
  const std::string both = first.cert + second.cert;
  Install(first);
  Start();
  EXPECT_EQ(ServedName(both), "first");
  Install(second);
  EXPECT_EQ(ServedNameWithin(5, "second-name", both), "second-name");
}

TEST_F(TlsCredentialsTest, ARenewedClientCaIsFollowed) {
  const PemPair server = SelfSignedCert("server");
  const PemPair old_client = SelfSignedCert("old-client");
  const PemPair new_client = SelfSignedCert("new-client");
  Install(server);
  files_.client_ca = base_ + "_ca.pem";
  ASSERT_TRUE(WriteTextFile(files_.client_ca, old_client.cert));
  Start();
  EXPECT_EQ(ServedName(server.cert, old_client), "server");
  EXPECT_EQ(ServedName(server.cert), "") << "a client without a certificate got in";
  EXPECT_EQ(ServedName(server.cert, new_client), "") << "an untrusted client got in";

  ASSERT_TRUE(WriteTextFile(files_.client_ca, new_client.cert));
  EXPECT_EQ(ServedNameWithin(5, "server", server.cert, new_client), "server");
  EXPECT_EQ(ServedName(server.cert, old_client), "") << "the replaced CA is still trusted";
}

TEST_F(TlsCredentialsTest, FilesThatCannotServeStopTheStartNamingFlagAndFile) {
  const PemPair pair = SelfSignedCert("server");
  Install(pair);
  ASSERT_TRUE(CheckServerTlsFiles(files_).ok());

  ASSERT_TRUE(WriteTextFile(files_.key, SelfSignedCert("other").key));
  absl::Status mismatched = CheckServerTlsFiles(files_);
  EXPECT_TRUE(absl::IsInvalidArgument(mismatched)) << mismatched;
  EXPECT_NE(mismatched.message().find("--tls_key " + files_.key), std::string::npos)
      << mismatched;

  ServerTlsFiles missing = files_;
  missing.cert = base_ + "_absent.pem";
  absl::Status absent = CheckServerTlsFiles(missing);
  EXPECT_NE(absent.message().find("--tls_cert " + missing.cert), std::string::npos) << absent;

  Install(pair);
  ServerTlsFiles bad_ca = files_;
  bad_ca.client_ca = base_ + "_ca.pem";
  ASSERT_TRUE(WriteTextFile(bad_ca.client_ca, "not a certificate\n"));
  absl::Status ca = CheckServerTlsFiles(bad_ca);
  EXPECT_NE(ca.message().find("--tls_client_ca " + bad_ca.client_ca), std::string::npos) << ca;
  EXPECT_FALSE(ServerTlsCredentials(bad_ca).ok());
}

}  // namespace
}  // namespace blossom
