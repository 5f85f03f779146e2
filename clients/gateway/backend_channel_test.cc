// The reconnect policy against a real server that goes away and comes back on the same port; TLS
// options, and mutual TLS against a server that requires a client certificate.
#include "clients/gateway/backend_channel.h"

#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/gateway/test_certs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/testing/fake_health_service.h"

namespace blossom::gateway {
namespace {

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

}  // namespace
}  // namespace blossom::gateway
