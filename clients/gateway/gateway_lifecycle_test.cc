// Everything around the gateway's calls rather than their translation, in-process (fixture:
// gateway_test_util.h): API keys and the forwarded Authorization, health and metrics, draining,
// and how calls end (client disconnects, deadlines, an unreachable backend).
#include "clients/gateway/gateway.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/gateway/gateway_test_util.h"
#include "clients/gateway/json_fields.h"
#include "gtest/gtest.h"
#include "server/http/test_client.h"

namespace blossom::gateway {
namespace {

using testing::Client;
using testing::GatewayTest;

TEST_F(GatewayTest, AuthOnEveryRouteButLive) {
  GatewayOptions options;
  options.api_keys = auth::ApiKeys({"good-key"});
  options.backend_api_key = "backend-secret";
  StartGateway(options);
  EXPECT_EQ(Request("GET", "/live", "").status, 200);
  Client::Reply denied = Request("GET", "/v1/models", "");
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(Json::parse(denied.body)["error"]["type"], "authentication_error");
  // /health is open (readiness probes send no key), with a wrong key or none, also when the
  // backend checks keys on its own calls.
  fake_.set_required_authorization("Bearer backend-secret");
  EXPECT_EQ(Request("GET", "/health", "", "Authorization: Bearer bad-key\r\n").status, 200);
  EXPECT_EQ(Request("GET", "/health", "").status, 200);
  Client::Reply tgi = Request("POST", "/generate", R"({"inputs":"hi"})");
  EXPECT_EQ(tgi.status, 401);
  EXPECT_EQ(Json::parse(tgi.body)["error_type"], "authentication");
  EXPECT_EQ(Request("GET", "/metrics", "").status, 401);

  Client::Reply models = Request("GET", "/v1/models", "", "Authorization: Bearer good-key\r\n");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(Json::parse(models.body)["data"][0]["id"], "bloom-test");
  EXPECT_EQ(fake_.last_authorization(), "Bearer backend-secret");
  EXPECT_EQ(Request("GET", "/health", "", "Authorization: Bearer good-key\r\n").status, 200);
}

// OpenAI's model retrieval: the served model by name (percent-encoded or not), 404 otherwise.
TEST_F(GatewayTest, RetrievesTheServedModelByName) {
  StartGateway({});
  Client::Reply one = Request("GET", "/v1/models/bloom-test", "");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(Json::parse(one.body)["id"], "bloom-test");
  EXPECT_EQ(Json::parse(one.body)["object"], "model");
  EXPECT_EQ(Request("GET", "/v1/models/bloom%2Dtest", "").status, 200);
  Client::Reply other = Request("GET", "/v1/models/bigscience%2Fbloom", "");
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(Json::parse(other.body)["error"]["code"], "model_not_found");
  EXPECT_EQ(Json::parse(other.body)["error"]["param"], "model");
  EXPECT_EQ(other.body.find("bigscience"), std::string::npos) << "the asked name is not echoed";
  EXPECT_EQ(Request("POST", "/v1/models/bloom-test", "{}").status, 405);
  EXPECT_EQ(Request("GET", "/v1/models/", "").status, 404) << "no name: no route";
  GatewayOptions named;
  named.served_model_name = "org/served";
  StartGateway(named);
  EXPECT_EQ(Request("GET", "/v1/models/org%2Fserved", "").status, 200);
  EXPECT_EQ(Request("GET", "/v1/models/org/served", "").status, 200);
}

TEST_F(GatewayTest, ForwardsClientAuthorizationWithoutBackendKey) {
  StartGateway({});
  Client::Reply reply = Request("POST", "/generate", R"({"inputs":"hi"})", "Authorization: Bearer client-key\r\n");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(fake_.last_authorization(), "Bearer client-key");
}

// Issue 14: an Authorization value gRPC cannot carry was forwarded as metadata and gRPC
// aborted the process; a 9,000-byte one overflowed the metadata into a 429.
TEST_F(GatewayTest, ForwardedAuthorizationIsCheckedBeforeGrpc) {
  StartGateway({});
  for (const char* header : {"Authorization: Bearer \xc3\xa9\r\n", "Authorization: Bearer a\tb\r\n",
                             "Authorization: \x7f\r\n"}) {
    Client::Reply reply = Request("GET", "/health", "", header);
    EXPECT_TRUE(reply.status == 400) << header << " -> " << reply.status;
    EXPECT_EQ(Request("POST", "/generate", R"({"inputs":"hi"})", header).status, 400) << header;
  }
  Client::Reply huge = Request("GET", "/health", "", absl::StrCat("Authorization: Bearer ",
                                                                   std::string(9000, 'k'), "\r\n"));
  EXPECT_EQ(huge.status, 431);
  EXPECT_TRUE(absl::StrContains(huge.body, "longer than 1024 bytes")) << huge.body;
  EXPECT_EQ(fake_.requests(), 0);
  // A tab or extra spaces between scheme and key are tolerated and sent in canonical form.
  EXPECT_EQ(Request("POST", "/generate", R"({"inputs":"hi"})", "Authorization: bearer\t  k1\r\n").status, 200);
  EXPECT_EQ(fake_.last_authorization(), "Bearer k1");
  EXPECT_EQ(Request("GET", "/live", "", "Authorization: \xc3\xa9\r\n").status, 200);
}

// Issue 14: the gateway said 200 while the server drained and refused every completion. The
// gateway watches the backend's health, so /health follows each change within a bound.
TEST_F(GatewayTest, HealthFollowsTheBackendsHealthStatus) {
  StartGateway({});
  EXPECT_EQ(HealthWithin(200).status, 200);
  SetBackendServing(false);  // what blossom-server does on SIGTERM
  Client::Reply draining = HealthWithin(503);
  EXPECT_EQ(draining.status, 503);
  EXPECT_TRUE(absl::StrContains(draining.body, "loading or draining")) << draining.body;
  SetBackendServing(true);
  EXPECT_EQ(HealthWithin(200).status, 200);
  SetBackendServing(false);
  EXPECT_EQ(HealthWithin(503).status, 503);
}

TEST_F(GatewayTest, DrainRefusesNewRequestsAndLetsStreamsRun) {
  StartGateway({});
  Client stream(http_->port());
  const std::string body = R"({"prompt":"hang","stream":true})";
  ASSERT_TRUE(stream.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nContent-Length: ", body.size(),
                                       "\r\n\r\n", body)));
  Client::Reply head;
  ASSERT_TRUE(stream.ReadHead(&head));
  std::string chunk;
  ASSERT_TRUE(stream.ReadChunk(&chunk));
  gateway_->StartDraining();
  EXPECT_EQ(Request("GET", "/health", "").status, 503);
  EXPECT_EQ(Request("POST", "/v1/completions", R"({"prompt":"hi"})").status, 503);
  EXPECT_EQ(Request("GET", "/live", "").status, 200);
  EXPECT_EQ(gateway_->pending_calls(), 1);  // the stream runs on
  EXPECT_EQ(fake_.cancelled(), 0);
}

TEST_F(GatewayTest, ClientDisconnectCancelsStreamingCall) {
  StartGateway({});
  auto client = std::make_unique<Client>(http_->port());
  const std::string body = R"({"prompt":"hang","stream":true})";
  ASSERT_TRUE(client->Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nContent-Length: ", body.size(),
                                        "\r\n\r\n", body)));
  Client::Reply head;
  ASSERT_TRUE(client->ReadHead(&head));
  EXPECT_EQ(head.status, 200);
  std::string chunk;
  ASSERT_TRUE(client->ReadChunk(&chunk));
  EXPECT_TRUE(absl::StrContains(chunk, "Hel")) << chunk;
  client.reset();  // drop the connection mid-stream
  EXPECT_TRUE(fake_.WaitFor([&] { return fake_.cancelled_ == 1; }));
}

TEST_F(GatewayTest, ClientDisconnectCancelsUnaryCall) {
  StartGateway({});
  auto client = std::make_unique<Client>(http_->port());
  const std::string body = R"({"inputs":"hang"})";
  ASSERT_TRUE(client->Send(absl::StrCat("POST /generate HTTP/1.1\r\nContent-Length: ", body.size(),
                                        "\r\n\r\n", body)));
  ASSERT_TRUE(fake_.WaitFor([&] { return fake_.requests_ == 1; }));
  client.reset();
  EXPECT_TRUE(fake_.WaitFor([&] { return fake_.cancelled_ == 1; }));
  // Counted as the client's doing (499), not as the cancelled call's 503.
  for (int i = 0; i < 100 && gateway_->pending_calls() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(gateway_->pending_calls(), 0);
  const std::string metrics = Request("GET", "/metrics", "").body;
  EXPECT_TRUE(absl::StrContains(
      metrics, "blossom_gateway_requests_total{route=\"generate\",status=\"499\"} 1"))
      << metrics;
  EXPECT_FALSE(absl::StrContains(metrics, "status=\"503\"")) << metrics;
}

TEST_F(GatewayTest, DeadlineGives504) {
  GatewayOptions options;
  options.request_timeout = absl::Milliseconds(200);
  StartGateway(options);
  Client::Reply reply = Request("POST", "/v1/completions", R"({"prompt":"hang"})");
  EXPECT_EQ(reply.status, 504);
}

TEST_F(GatewayTest, HealthAndMetrics) {
  StartGateway({});
  EXPECT_EQ(Request("GET", "/health", "").status, 200);
  SetBackendServing(false);  // a loading blossom-server: NOT_SERVING, and its calls fail
  fake_.ready_ = false;
  EXPECT_EQ(HealthWithin(503).status, 503);
  Request("POST", "/v1/completions", R"({"prompt":"hi"})");
  Client::Reply metrics = Request("GET", "/metrics", "");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_TRUE(absl::StrContains(metrics.body, "blossom_gateway_requests_total{route=\"completions\",status=\"200\"} 1"))
      << metrics.body;
  EXPECT_TRUE(absl::StrContains(metrics.body, "blossom_gateway_requests_total{route=\"health\",status=\"503\"} "))
      << metrics.body;
}

TEST_F(GatewayTest, HealthIs503WhenBackendIsDown) {
  GatewayOptions options;
  options.health_timeout = absl::Milliseconds(500);
  // A port with nothing listening: bind one, then close it.
  int probe_port = 0;
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    probe_port = ntohs(addr.sin_port);
    close(fd);
  }
  StartGateway(options, probe_port);
  EXPECT_EQ(Request("GET", "/health", "").status, 503);
  EXPECT_EQ(Request("GET", "/live", "").status, 200);
  EXPECT_EQ(Request("POST", "/v1/completions", R"({"prompt":"x"})").status, 503);
}

}  // namespace
}  // namespace blossom::gateway
