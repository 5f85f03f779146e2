// The reconnect policy against a real server that goes away and comes back on the same port; TLS
// options, and mutual TLS against a server that requires a client certificate; the server's
// name checked against the target; renewed certificate files followed without a restart.
#include "clients/gateway/backend_channel.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/gateway/test_certs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/testing/fake_health_service.h"
#include "server/testing/self_signed_cert.h"

namespace blossom::gateway {
namespace {

using ::blossom::testing::PemPair;
using ::blossom::testing::SelfSignedCert;
using ::blossom::testing::WriteTextFile;

std::string TestPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

// The "system roots" of this test binary: gRPC reads them from GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
// (once, when a TLS channel first needs them), so a channel without --backend-ca-file trusts
// this certificate and no other. Set before any test runs.
const PemPair& SystemRootServer() {
  static const PemPair* pair = new PemPair(SelfSignedCert("system-root-server"));
  return *pair;
}
class SystemRoots : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string path = TestPath("system_roots.pem");
    ASSERT_TRUE(WriteTextFile(path, SystemRootServer().cert));
    setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", path.c_str(), 1);
  }
};
::testing::Environment* const kSystemRoots = ::testing::AddGlobalTestEnvironment(new SystemRoots);

std::unique_ptr<grpc::Server> StartHealthServer(int port, int* bound) {
  // Never destroyed: it outlives every server the tests start and stop on it.
  static auto* service = new blossom::testing::ServingHealthService;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), bound);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// One call as a generation request makes it: no wait_for_ready, so it fails at once while the
// channel is waiting out a backoff.
bool CheckOnce(grpc::health::v1::Health::Stub* stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&context, request, &response).ok();
}

// An outage during which clients keep calling, as the gateway's users would.
void KeepCallingFor(grpc::health::v1::Health::Stub* stub, std::chrono::seconds outage) {
  const auto until = std::chrono::steady_clock::now() + outage;
  while (std::chrono::steady_clock::now() < until) {
    CheckOnce(stub);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Issue 14: after outages of 10, 60 and 150 s the gateway needed 2.5, 13 and 45 s to notice
// the restarted server (gRPC's default backoff grows to 120 s). Here a 12 s outage: with gRPC's
// defaults the next attempt after the restart comes seconds later; capped, within ~1 s.
TEST(BackendChannelTest, FindsARestartedServerWithinTheBackoffCap) {
  int port = 0;
  auto server = StartHealthServer(0, &port);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  BackendChannelOptions options;
  options.target = absl::StrCat("127.0.0.1:", port);
  auto channel = MakeBackendChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  ASSERT_TRUE(CheckOnce(stub.get()));

  server->Shutdown(std::chrono::system_clock::now());
  server.reset();
  KeepCallingFor(stub.get(), std::chrono::seconds(12));
  int rebound = 0;
  server = StartHealthServer(port, &rebound);
  ASSERT_EQ(rebound, port);
  const auto up = std::chrono::steady_clock::now();
  while (!CheckOnce(stub.get())) {
    ASSERT_LT(std::chrono::steady_clock::now() - up, std::chrono::seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - up).count();
  EXPECT_LT(seconds, 1.5) << "reconnected only after " << seconds << " s";
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(BackendChannelTest, ProbeSkipsTheBackoff) {
  int port = 0;
  auto server = StartHealthServer(0, &port);
  ASSERT_NE(server, nullptr);
  BackendChannelOptions options;
  options.target = absl::StrCat("127.0.0.1:", port);
  options.max_reconnect_backoff_ms = 60000;  // as if the cap were long
  auto channel = MakeBackendChannel(options);
  ASSERT_TRUE(channel.ok());
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  ASSERT_TRUE(CheckOnce(stub.get()));
  server->Shutdown(std::chrono::system_clock::now());
  server.reset();
  KeepCallingFor(stub.get(), std::chrono::seconds(5));
  int rebound = 0;
  server = StartHealthServer(port, &rebound);
  ASSERT_EQ(rebound, port);
  const auto up = std::chrono::steady_clock::now();
  bool ok = false;
  while (!ok && std::chrono::steady_clock::now() - up < std::chrono::seconds(10)) {
    ReconnectNowIfFailing(channel->get());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ok = CheckOnce(stub.get());
  }
  ASSERT_TRUE(ok);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - up).count(), 1.5);
  server->Shutdown(std::chrono::system_clock::now());
}

// A backend whose Tokenize answers with more than gRPC's default 4 MiB receive limit.
class LargeAnswers : public v1::Blossom::CallbackService {
 public:
  static constexpr int kTokens = 1 << 20;  // 1M ids + 1M 4-byte strings: over 6 MiB
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest*,
                                     v1::TokenizeResponse* response) override {
    for (int i = 0; i < kTokens; ++i) {
      response->add_ids(i);
      response->add_tokens("abcd");
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

TEST(BackendChannelTest, ReceivesAnswersOverFourMebibytes) {
  LargeAnswers service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  BackendChannelOptions options;
  options.target = absl::StrCat("127.0.0.1:", port);
  auto channel = MakeBackendChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::Blossom::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::TokenizeRequest request;
  v1::TokenizeResponse response;
  const grpc::Status status = stub->Tokenize(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_GT(response.ByteSizeLong(), size_t{4} << 20);
  EXPECT_EQ(response.ids_size(), LargeAnswers::kTokens);
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(BackendChannelTest, TlsOptionsAreChecked) {
  BackendChannelOptions options;
  options.target = "127.0.0.1:1";
  options.ca_file = "/nonexistent/ca.pem";
  EXPECT_FALSE(MakeBackendChannel(options).ok());  // a CA file without TLS
  options.tls = true;
  EXPECT_FALSE(MakeBackendChannel(options).ok());  // unreadable
  options.ca_file = "/dev/null";
  EXPECT_FALSE(MakeBackendChannel(options).ok());  // empty: would mean the system roots
  options.ca_file.clear();
  EXPECT_TRUE(MakeBackendChannel(options).ok());   // system roots
}

// A client certificate: both files or neither, with TLS, readable.
TEST(BackendChannelTest, ClientCertificateOptionsAreChecked) {
  const testing::TestCerts& certs = testing::MakeTestCerts();
  BackendChannelOptions options;
  options.target = "localhost:1";
  options.tls = true;
  options.cert_file = certs.client_cert;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeBackendChannel(options);
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(channel.status().message(),
            "--backend-tls-cert and --backend-tls-key go together (a client certificate is "
            "useless without its key)");
  options.cert_file.clear();
  options.key_file = certs.client_key;
  EXPECT_FALSE(MakeBackendChannel(options).ok());
  options.cert_file = "/nonexistent/client.pem";
  channel = MakeBackendChannel(options);
  ASSERT_FALSE(channel.ok());
  EXPECT_TRUE(absl::StrContains(channel.status().message(), "--backend-tls-cert: cannot read"))
      << channel.status();
  options.cert_file = certs.client_cert;
  options.tls = false;
  channel = MakeBackendChannel(options);
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().message(), "--backend-tls-cert needs TLS (--backend-tls)");
  options.tls = true;
  EXPECT_TRUE(MakeBackendChannel(options).ok());
}

// blossom-server --tls_client_ca: a server that requires a client certificate from its CA. The
// channel built with --backend-tls-cert/--backend-tls-key gets through; without them it cannot.
TEST(BackendChannelTest, PresentsTheClientCertificateForMutualTls) {
  const testing::TestCerts& certs = testing::MakeTestCerts();
  blossom::testing::ServingHealthService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", certs.MutualTlsServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  BackendChannelOptions options;
  options.target = absl::StrCat("localhost:", port);  // the name the server certificate holds
  options.tls = true;
  options.ca_file = certs.ca;
  options.cert_file = certs.client_cert;
  options.key_file = certs.client_key;
  auto channel = MakeBackendChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  bool ok = false;
  for (int i = 0; i < 40 && !ok; ++i) ok = CheckOnce(stub.get());  // a handshake may be slow
  EXPECT_TRUE(ok) << "the mutual-TLS server refused the gateway's certificate";

  options.cert_file.clear();
  options.key_file.clear();
  auto without = MakeBackendChannel(options);
  ASSERT_TRUE(without.ok()) << without.status();
  auto refused = grpc::health::v1::Health::NewStub(*without);
  EXPECT_FALSE(CheckOnce(refused.get())) << "the server took a client without a certificate";
  server->Shutdown(std::chrono::system_clock::now());
}

// A server on `address` (host:port, port 0: any) presenting `server`; with `client_ca`, it requires
// a client certificate that one signed (blossom-server --tls_client_ca).
std::unique_ptr<grpc::Server> StartTlsServer(const std::string& address, const PemPair& server,
                                             const std::string& client_ca, int* port) {
  static auto* service = new blossom::testing::ServingHealthService;
  grpc::SslServerCredentialsOptions ssl(
      client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                        : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = client_ca;
  ssl.pem_key_cert_pairs.push_back({server.key, server.cert});
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::SslServerCredentials(ssl), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// CheckOnce until it succeeds or `limit` passes (a handshake may be slow); whether it did.
bool CheckWithin(grpc::health::v1::Health::Stub* stub, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!CheckOnce(stub)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// Whether a new channel to `target` with `options` gets a health check through.
bool Reaches(BackendChannelOptions options, const std::string& target) {
  options.target = target;
  auto channel = MakeBackendChannel(options);
  EXPECT_TRUE(channel.ok()) << channel.status();
  if (!channel.ok()) return false;
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  return CheckWithin(stub.get(), std::chrono::seconds(3));
}

// The server's certificate names localhost and 127.0.0.1: a --backend of either verifies, with
// --backend-ca-file or the system roots, and an address it does not name is refused.
TEST(BackendChannelTest, TheServersNameIsCheckedAgainstTheTarget) {
  const PemPair& server = SystemRootServer();
  int port = 0;
  auto tls_server = StartTlsServer("127.0.0.1:0", server, "", &port);
  ASSERT_NE(tls_server, nullptr);
  BackendChannelOptions options;
  options.tls = true;
  options.ca_file = TestPath("names_ca.pem");
  ASSERT_TRUE(WriteTextFile(options.ca_file, server.cert));
  EXPECT_TRUE(Reaches(options, absl::StrCat("localhost:", port)));
  EXPECT_TRUE(Reaches(options, absl::StrCat("127.0.0.1:", port)));
  EXPECT_TRUE(Reaches(options, absl::StrCat("ipv4:127.0.0.1:", port)));
  BackendChannelOptions system_roots = options;
  system_roots.ca_file.clear();
  EXPECT_TRUE(Reaches(system_roots, absl::StrCat("localhost:", port)));
  // A CA that did not sign the server's certificate.
  BackendChannelOptions other_ca = options;
  other_ca.ca_file = TestPath("names_other_ca.pem");
  ASSERT_TRUE(WriteTextFile(other_ca.ca_file, SelfSignedCert("other").cert));
  EXPECT_FALSE(Reaches(other_ca, absl::StrCat("localhost:", port)));

  // The same certificate on an address it does not name (all of 127/8 is loopback on Linux).
  int other_port = 0;
  auto elsewhere = StartTlsServer("127.0.0.2:0", server, "", &other_port);
  ASSERT_NE(elsewhere, nullptr);
  EXPECT_FALSE(Reaches(options, absl::StrCat("127.0.0.2:", other_port)))
      << "a certificate for localhost and 127.0.0.1 was taken for 127.0.0.2";
  EXPECT_FALSE(Reaches(system_roots, absl::StrCat("127.0.0.2:", other_port)));
  elsewhere->Shutdown(std::chrono::system_clock::now());
  tls_server->Shutdown(std::chrono::system_clock::now());
}

// Files gRPC would only log about at every handshake stop the start, naming flag and file.
TEST(BackendChannelTest, TlsFilesThatCannotWorkAreRefusedAtStart) {
  const PemPair client = SelfSignedCert("client");
  BackendChannelOptions options;
  options.target = "localhost:1";
  options.tls = true;
  options.cert_file = TestPath("start_cert.pem");
  options.key_file = TestPath("start_key.pem");
  ASSERT_TRUE(WriteTextFile(options.cert_file, client.cert));
  ASSERT_TRUE(WriteTextFile(options.key_file, SelfSignedCert("another").key));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeBackendChannel(options);
  ASSERT_FALSE(channel.ok());
  EXPECT_TRUE(absl::StrContains(channel.status().message(),
                                absl::StrCat("--backend-tls-key ", options.key_file)))
      << channel.status();

  ASSERT_TRUE(WriteTextFile(options.key_file, client.key));
  ASSERT_TRUE(WriteTextFile(options.cert_file, "not a certificate\n"));
  channel = MakeBackendChannel(options);
  ASSERT_FALSE(channel.ok());
  EXPECT_TRUE(absl::StrContains(channel.status().message(),
                                absl::StrCat("--backend-tls-cert ", options.cert_file)))
      << channel.status();

  ASSERT_TRUE(WriteTextFile(options.cert_file, client.cert));
  options.ca_file = TestPath("start_ca.pem");
  ASSERT_TRUE(WriteTextFile(options.ca_file, "not a certificate\n"));
  channel = MakeBackendChannel(options);
  ASSERT_FALSE(channel.ok());
  EXPECT_TRUE(absl::StrContains(channel.status().message(),
                                absl::StrCat("--backend-ca-file ", options.ca_file)))
      << channel.status();
  ASSERT_TRUE(WriteTextFile(options.ca_file, client.cert));
  EXPECT_TRUE(MakeBackendChannel(options).ok());
}

// Replaces `path` in one step (a rename), as a Kubernetes Secret update does: gRPC's watcher
// never sees a half-written file.
void Install(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteTextFile(path + ".new", text));
  ASSERT_EQ(std::rename((path + ".new").c_str(), path.c_str()), 0) << path;
}

// A client certificate renewal: the server is restarted trusting only the new client certificate
// (its --tls_client_ca rotated), and the gateway's --backend-tls-cert/--backend-tls-key files are
// rewritten with it. The gateway's channel, built once, reconnects with the new pair once its
// file watcher has seen the files (every 5 s) instead of presenting the old one until a restart.
TEST(BackendChannelTest, ARenewedClientCertificateIsUsedWithoutARestart) {
  const PemPair server = SelfSignedCert("server");
  const PemPair old_client = SelfSignedCert("old-client");
  const PemPair new_client = SelfSignedCert("new-client");
  BackendChannelOptions options;
  options.tls = true;
  options.ca_file = TestPath("renewal_ca.pem");
  options.cert_file = TestPath("renewal_cert.pem");
  options.key_file = TestPath("renewal_key.pem");
  Install(options.ca_file, server.cert);
  Install(options.cert_file, old_client.cert);
  Install(options.key_file, old_client.key);
  int port = 0;
  auto tls_server = StartTlsServer("127.0.0.1:0", server, old_client.cert, &port);
  ASSERT_NE(tls_server, nullptr);
  options.target = absl::StrCat("localhost:", port);
  auto channel = MakeBackendChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  ASSERT_TRUE(CheckWithin(stub.get(), std::chrono::seconds(5)));

  tls_server->Shutdown(std::chrono::system_clock::now());
  tls_server.reset();
  int rebound = 0;
  tls_server = StartTlsServer(absl::StrCat("127.0.0.1:", port), server, new_client.cert, &rebound);
  ASSERT_NE(tls_server, nullptr);
  ASSERT_EQ(rebound, port);
  EXPECT_FALSE(CheckWithin(stub.get(), std::chrono::seconds(1)))
      << "the server took the replaced client certificate";

  Install(options.cert_file, new_client.cert);
  Install(options.key_file, new_client.key);
  const auto renewed = std::chrono::steady_clock::now();
  EXPECT_TRUE(CheckWithin(stub.get(), std::chrono::seconds(10)))
      << "the channel still presents the replaced certificate";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - renewed).count();
  EXPECT_LT(seconds, 7.5) << "the renewed certificate was used only after " << seconds << " s";
  tls_server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace blossom::gateway
