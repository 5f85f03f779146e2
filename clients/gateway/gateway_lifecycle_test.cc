// Everything around the gateway's calls rather than their translation, in-process (fixture:
// gateway_test_util.h): API keys and the forwarded Authorization, health and metrics, draining
// and its end (AbortInFlight), and how calls end (client disconnects, deadlines, a stream that
// fails midway, an unreachable backend).
#include "clients/gateway/gateway.h"

#include <arpa/inet.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

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
using testing::OpenStream;
using testing::RestOfStream;
using testing::UnusedLoopbackPort;

TEST_F(GatewayTest, AuthOnEveryRouteButLiveAndHealth) {
  GatewayOptions options;
  options.api_keys = auth::ApiKeys({"good-key"});
  options.backend_api_key = "backend-secret";
  StartGateway(options);
  EXPECT_EQ(Request("GET", "/live", "").status, 200);
  Client::Reply denied = Request("GET", "/v1/models", "");
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(Json::parse(denied.body)["error"]["type"], "authentication_error");
  EXPECT_EQ(Json::parse(denied.body)["error"]["code"], "invalid_api_key");  // OpenAI's
  EXPECT_EQ(denied.headers["www-authenticate"], "Bearer");
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

// With keys, a caller without one learns nothing about the keyed routes: a wrong method is 401
// like a right one (a 405 with Allow would list the routes and their methods). Unknown paths stay
// 404, and the open routes (/live, /health) keep their 405.
TEST_F(GatewayTest, KeyIsCheckedBeforeTheMethod) {
  GatewayOptions options;
  options.api_keys = auth::ApiKeys({"good-key"});
  StartGateway(options);
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v1/completions"}, {"DELETE", "/v1/models"}, {"PUT", "/generate"},
           {"POST", "/metrics"}, {"GET", "/tokenize"}, {"POST", "/v1/models/x"}}) {
    Client::Reply reply = Request(method, path, "");
    EXPECT_EQ(reply.status, 401) << method << " " << path << ": " << reply.body;
    EXPECT_EQ(reply.headers.count("allow"), 0u) << method << " " << path;
    Client::Reply keyed = Request(method, path, "", "Authorization: Bearer good-key\r\n");
    EXPECT_EQ(keyed.status, 405) << method << " " << path << ": " << keyed.body;
    EXPECT_EQ(keyed.headers.count("allow"), 1u) << method << " " << path;
  }
  EXPECT_EQ(Request("GET", "/no/such/route", "").status, 404);
  EXPECT_EQ(Request("POST", "/live", "").status, 405);
  EXPECT_EQ(Request("POST", "/health", "").status, 405);
  EXPECT_EQ(fake_.requests(), 0);
}

// --metrics-api-keys-file: a scrape key opens /metrics and nothing else; the client keys open
// /metrics too.
TEST_F(GatewayTest, MetricsKeysOpenOnlyMetrics) {
  GatewayOptions options;
  options.api_keys = auth::ApiKeys({"client-key"});
  options.metrics_api_keys = auth::ApiKeys({"scrape-key"});
  StartGateway(options);
  const std::string scrape = "Authorization: Bearer scrape-key\r\n";
  const std::string client = "Authorization: Bearer client-key\r\n";
  Client::Reply metrics = Request("GET", "/metrics", "", scrape);
  EXPECT_EQ(metrics.status, 200) << metrics.body;
  EXPECT_TRUE(absl::StrContains(metrics.body, "blossom_gateway_requests_total")) << metrics.body;
  EXPECT_EQ(Request("GET", "/metrics", "", client).status, 200);
  EXPECT_EQ(Request("GET", "/metrics", "").status, 401);
  EXPECT_EQ(Request("GET", "/metrics", "", "Authorization: Bearer wrong\r\n").status, 401);
  for (const auto& [method, path, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/completions", R"({"prompt":"hi"})"},
           {"POST", "/generate", R"({"inputs":"hi"})"},
           {"POST", "/tokenize", R"({"inputs":"hi"})"},
           {"GET", "/v1/models", ""},
           {"GET", "/info", ""},
           {"GET", "/openapi.json", ""}}) {
    EXPECT_EQ(Request(method, path, body, scrape).status, 401) << method << " " << path;
  }
  EXPECT_EQ(fake_.requests(), 0);
  EXPECT_EQ(Request("POST", "/v1/completions", R"({"prompt":"hi"})", client).status, 200);

  // Scrape keys alone: /metrics needs one while the other routes stay open.
  GatewayOptions scrape_only;
  scrape_only.metrics_api_keys = auth::ApiKeys({"scrape-key"});
  StartGateway(scrape_only);
  EXPECT_EQ(Request("GET", "/metrics", "").status, 401);
  EXPECT_EQ(Request("GET", "/metrics", "", scrape).status, 200);
  EXPECT_EQ(Request("GET", "/v1/models", "").status, 200);
}

// /health is open, and gRPC's error text (addresses, certificate and resolver errors, the
// server's refusals) is for callers with a key: others get a fixed message.
TEST_F(GatewayTest, HealthShowsBackendErrorsOnlyToKeyHolders) {
  GatewayOptions options;
  options.health_timeout = absl::Milliseconds(300);
  options.api_keys = auth::ApiKeys({"good-key"});
  StartGateway(options, /*backend_port=*/1);  // nothing listens there
  for (const char* header : {"", "Authorization: Bearer wrong\r\n"}) {
    Client::Reply anonymous = Request("GET", "/health", "", header);
    EXPECT_EQ(anonymous.status, 503);
    EXPECT_EQ(Json::parse(anonymous.body)["error"], "backend not ready") << anonymous.body;
  }
  Client::Reply keyed = Request("GET", "/health", "", "Authorization: Bearer good-key\r\n");
  EXPECT_EQ(keyed.status, 503);
  const std::string detail = Json::parse(keyed.body)["error"].get<std::string>();
  EXPECT_TRUE(absl::StartsWith(detail, "backend not ready: ")) << detail;
  EXPECT_GT(detail.size(), std::string("backend not ready: ").size()) << detail;

  // Without keys there is no one to hide it from.
  GatewayOptions open;
  open.health_timeout = absl::Milliseconds(300);
  StartGateway(open, /*backend_port=*/1);
  const std::string open_detail =
      Json::parse(Request("GET", "/health", "").body)["error"].get<std::string>();
  EXPECT_TRUE(absl::StartsWith(open_detail, "backend not ready: ")) << open_detail;
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

// The drain's end (gateway_main.cc at --drain-timeout or a second signal): AbortInFlight, then
// the HTTP server's Drain writes the answers out, then Stop. Every open stream ends in its
// API's shape: OpenAI an error event and [DONE], TGI its error event, each with the chunked
// body's end; a request whose response has not started gets a 503 with Retry-After. Before,
// Stop() cut the streams off mid-body (curl: "transfer closed with outstanding read data").
TEST_F(GatewayTest, AbortInFlightEndsEveryRequestInItsShape) {
  StartGateway({});
  auto openai = OpenStream(http_->port(), "/v1/completions", R"({"prompt":"hang","stream":true})");
  auto tgi = OpenStream(http_->port(), "/generate_stream", R"({"inputs":"hang"})");
  Client unary(http_->port());
  const std::string body = R"({"inputs":"hang"})";
  ASSERT_TRUE(unary.Send(absl::StrCat("POST /generate HTTP/1.1\r\nContent-Length: ", body.size(),
                                      "\r\n\r\n", body)));
  ASSERT_TRUE(fake_.WaitFor([&] { return fake_.requests_ >= 3; }));

  gateway_->StartDraining();
  http_->EndKeepAlive();
  gateway_->AbortInFlight();
  for (int i = 0; i < 200 && gateway_->pending_calls() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(gateway_->pending_calls(), 0);
  EXPECT_TRUE(http_->Drain(absl::Now() + absl::Seconds(2)).ok());
  http_->Stop();

  Client::Reply rest = RestOfStream(*openai);
  std::vector<std::string> events = GatewayTest::Events(rest.body);
  ASSERT_EQ(events.size(), 2u) << rest.body;
  Json error = Json::parse(events[0])["error"];
  EXPECT_EQ(error["message"], Gateway::kShutDownMessage) << events[0];
  EXPECT_EQ(error["type"], "service_unavailable_error");
  EXPECT_EQ(events[1], "[DONE]");
  EXPECT_TRUE(rest.ended) << "no terminating chunk";

  rest = RestOfStream(*tgi);
  events = GatewayTest::Events(rest.body);
  ASSERT_EQ(events.size(), 1u) << rest.body;
  EXPECT_EQ(Json::parse(events[0])["error"], Gateway::kShutDownMessage);
  EXPECT_EQ(Json::parse(events[0])["error_type"], "unhealthy");
  EXPECT_TRUE(rest.ended) << "no terminating chunk";

  Client::Reply answer;
  ASSERT_TRUE(unary.ReadReply(&answer));
  EXPECT_EQ(answer.status, 503);
  EXPECT_EQ(answer.headers["retry-after"], "1");
  EXPECT_EQ(Json::parse(answer.body)["error"], Gateway::kShutDownMessage);
  EXPECT_EQ(answer.headers["connection"], "close");

  EXPECT_TRUE(fake_.WaitFor([&] { return fake_.cancelled_ >= 3; })) << "backend calls cancelled";
  const std::string metrics = gateway_->metrics().Text();
  EXPECT_TRUE(absl::StrContains(
      metrics, "blossom_gateway_stream_errors_total{route=\"completions\",reason=\"shutdown\"} 1"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(
      metrics,
      "blossom_gateway_stream_errors_total{route=\"generate_stream\",reason=\"shutdown\"} 1"))
      << metrics;
}

// From the start of the drain, the 503 for a new request invites a retry elsewhere: Retry-After,
// and its connection closes (a pooled keep-alive client would otherwise keep reusing it).
TEST_F(GatewayTest, DrainingRefusalClosesTheConnectionAndInvitesARetry) {
  StartGateway({});
  Client pooled(http_->port());
  ASSERT_TRUE(pooled.Send("GET /v1/models HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(pooled.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers.count("connection"), 0u);
  gateway_->StartDraining();
  http_->EndKeepAlive();  // as gateway_main.cc does with StartDraining
  const std::string body = R"({"prompt":"hi"})";
  ASSERT_TRUE(pooled.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nContent-Length: ",
                                       body.size(), "\r\n\r\n", body)));
  reply = Client::Reply();
  ASSERT_TRUE(pooled.ReadReply(&reply));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.headers["retry-after"], "1");
  EXPECT_EQ(reply.headers["connection"], "close");
  EXPECT_TRUE(pooled.WaitClosed());
  Client::Reply tgi = Request("POST", "/generate", R"({"inputs":"hi"})");
  EXPECT_EQ(tgi.status, 503);
  EXPECT_EQ(tgi.headers["retry-after"], "1");
  EXPECT_EQ(tgi.headers["connection"], "close");
}

// A stream's error event carries what the unary answer would: the code from the reason and the
// param from the field (a client decides on them whether to retry: shutting_down yes,
// no_token_possible never).
TEST_F(GatewayTest, AStreamsErrorEventHasTheUnaryAnswersCodeAndParam) {
  StartGateway({});
  const std::string prompt =
      "midway-fail:9:no token can be sampled|sampling.bad_words|NO_TOKEN_POSSIBLE";
  for (const char* route : {"/v1/completions", "/v1/chat/completions"}) {
    const std::string body =
        std::string(route) == "/v1/completions"
            ? absl::StrCat(R"({"stream":true,"prompt":")", prompt, R"("})")
            : absl::StrCat(R"({"stream":true,"messages":[{"role":"user","content":")", prompt,
                           R"("}]})");
    const Client::Reply reply = Request("POST", route, body);
    ASSERT_EQ(reply.status, 200) << route << ": " << reply.body;
    const std::vector<std::string> events = GatewayTest::Events(reply.body);
    ASSERT_GE(events.size(), 2u) << reply.body;
    EXPECT_EQ(events.back(), "[DONE]");
    const Json error = Json::parse(events[events.size() - 2]);
    EXPECT_EQ(error["error"]["code"], "no_token_possible") << reply.body;
    EXPECT_EQ(error["error"]["param"], "bad_words") << reply.body;
    EXPECT_EQ(error["error"]["type"], "invalid_request_error") << reply.body;
  }
}

// A stream whose backend call fails after the 200 went out ends in an error event, and
// blossom_gateway_stream_errors_total counts it (requests_total has its 200).
TEST_F(GatewayTest, StreamFailingMidwayIsCountedAsAStreamError) {
  StartGateway({});
  auto openai = OpenStream(http_->port(), "/v1/completions",
                           R"({"prompt":"midway-fail:13:the engine failed","stream":true})");
  std::vector<std::string> events = GatewayTest::Events(RestOfStream(*openai).body);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(Json::parse(events[0])["error"]["message"], "the engine failed");
  EXPECT_EQ(events[1], "[DONE]");
  auto tgi = OpenStream(http_->port(), "/generate_stream",
                        R"({"inputs":"midway-fail:13:the engine failed"})");
  events = GatewayTest::Events(RestOfStream(*tgi).body);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(Json::parse(events[0])["error_type"], "generation");
  const std::string metrics = Request("GET", "/metrics", "").body;
  for (const char* route : {"completions", "generate_stream"}) {
    EXPECT_TRUE(absl::StrContains(
        metrics, absl::StrCat("blossom_gateway_stream_errors_total{route=\"", route,
                              "\",reason=\"backend_error\"} 1")))
        << metrics;
    EXPECT_TRUE(absl::StrContains(
        metrics, absl::StrCat("blossom_gateway_requests_total{route=\"", route,
                              "\",status=\"200\"} 1")))
        << metrics;
  }
}

// A backend that is down: gRPC's text names its address and port ("failed to connect to all
// addresses; ... ipv4:127.0.0.1:PORT: Connection refused"); clients get a fixed 503 that
// invites a retry, on every route that calls the backend.
TEST_F(GatewayTest, DeadBackendGivesAGeneric503) {
  GatewayOptions options;
  options.health_timeout = absl::Milliseconds(500);
  options.request_timeout = absl::Seconds(5);
  const int port = UnusedLoopbackPort();
  StartGateway(options, port);
  for (const auto& [method, path, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/completions", R"({"prompt":"x"})"},
           {"POST", "/v1/completions", R"({"prompt":"x","stream":true})"},
           {"POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}]})"},
           {"POST", "/generate", R"({"inputs":"x"})"},
           {"POST", "/generate_stream", R"({"inputs":"x"})"},
           {"POST", "/tokenize", R"({"inputs":"x"})"},
           {"GET", "/v1/models", ""},
           {"GET", "/info", ""}}) {
    Client::Reply reply = Request(method, path, body);
    EXPECT_EQ(reply.status, 503) << path << ": " << reply.body;
    EXPECT_EQ(reply.headers["retry-after"], "1") << path;
    EXPECT_TRUE(absl::StrContains(reply.body, kBackendUnavailableMessage)) << reply.body;
    EXPECT_FALSE(absl::StrContains(reply.body, "ipv4:")) << path << ": " << reply.body;
    EXPECT_FALSE(absl::StrContains(reply.body, absl::StrCat(port))) << path << ": " << reply.body;
  }
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
  // No error event went out: a client that left is no stream error.
  for (int i = 0; i < 100 && gateway_->pending_calls() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(absl::StrContains(gateway_->metrics().Text(), "blossom_gateway_stream_errors_total{"));
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
  StartGateway(options, UnusedLoopbackPort());
  EXPECT_EQ(Request("GET", "/health", "").status, 503);
  EXPECT_EQ(Request("GET", "/live", "").status, 200);
  EXPECT_EQ(Request("POST", "/v1/completions", R"({"prompt":"x"})").status, 503);
}

}  // namespace
}  // namespace blossom::gateway
