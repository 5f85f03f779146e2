// The HTTP/SSE client against a fake TGI/OpenAI-shaped server built on //server/http, with
// events split across chunk boundaries, plus the SSE and chunked-coding parsers on their own.
#include "benchmarks/http_sse_client.h"

#include <atomic>
#include <memory>

#include "benchmarks/load_runner.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/http/http_server.h"

namespace blossom {
namespace {

using Json = nlohmann::json;

TEST(SseParserTest, SplitsEventsAcrossFeedsAndLineEndings) {
  SseParser parser;
  EXPECT_TRUE(parser.Feed("data:{\"a\"").empty());
  std::vector<std::string> events = parser.Feed(":1}\n\ndata: [DONE]\r\n\r\n: comment\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "{\"a\":1}");
  EXPECT_EQ(events[1], "[DONE]");
  events = parser.Feed("event: x\ndata: one\ndata:two\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "one\ntwo");
}

TEST(ChunkedDecoderTest, DecodesAcrossFeedsAndRejectsGarbage) {
  ChunkedDecoder decoder;
  std::string out;
  ASSERT_TRUE(decoder.Feed("5\r\nhel", &out));
  ASSERT_TRUE(decoder.Feed("lo\r\nA;ext=1\r\n0123456789\r\n", &out));
  EXPECT_FALSE(decoder.done());
  ASSERT_TRUE(decoder.Feed("0\r\n\r\n", &out));
  EXPECT_TRUE(decoder.done());
  EXPECT_EQ(out, "hello0123456789");
  ChunkedDecoder bad;
  EXPECT_FALSE(bad.Feed("zz\r\n", &out));
}

TEST(HttpSseClientTest, TargetAndApiParsing) {
  auto t = ParseHttpTarget("http://127.0.0.1:8080");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->path_prefix, "");
  t = ParseHttpTarget("http://localhost/api/");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->port, 80);
  EXPECT_EQ(t->path_prefix, "/api");
  t = ParseHttpTarget("http://[::1]:9000");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, 9000);
  EXPECT_FALSE(ParseHttpTarget("grpc://x:1").ok());
  EXPECT_FALSE(ParseHttpTarget("http://x:0").ok());
  EXPECT_FALSE(ParseHttpApi("vllm").ok());
}

// Streams `max_new_tokens` TGI events (each split over two chunks) or OpenAI chunks; answers
// /tokenize with one token per byte; 429 for prompts starting with "busy".
class FakeServer {
 public:
  FakeServer() {
    http::ServerOptions options;
    options.handler_threads = 8;
    auto server = http::Server::Start(options, [this](const http::Request& request,
                                                      std::shared_ptr<http::ResponseWriter> w) {
      Handle(request, std::move(w));
    });
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  int port() const { return server_->port(); }
  std::string last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_;
  }
  std::string last_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_authorization_;
  }

 private:
  void Handle(const http::Request& request, std::shared_ptr<http::ResponseWriter> w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_body_ = request.body;
      const std::string* auth = request.Header("authorization");
      last_authorization_ = auth ? *auth : "";
    }
    Json body = Json::parse(request.body);
    if (request.path == "/tokenize") {
      Json out = Json::array();
      const std::string text = body["inputs"];
      for (size_t i = 0; i < text.size(); ++i) {
        out.push_back({{"id", static_cast<int>(static_cast<unsigned char>(text[i]))},
                       {"text", text.substr(i, 1)}, {"start", i}, {"stop", i + 1}});
      }
      w->Send({200, {{"Content-Type", "application/json"}}, out.dump()});
      return;
    }
    const bool tgi = request.path == "/generate_stream";
    const std::string prompt = tgi ? body["inputs"] : body["prompt"];
    if (prompt.rfind("busy", 0) == 0) {
      w->Send({429, {{"Content-Type", "application/json"}},
               R"({"error":"queue full","error_type":"overloaded"})"});
      return;
    }
    const int n = tgi ? body["parameters"]["max_new_tokens"].get<int>()
                      : body["max_tokens"].get<int>();
    w->StartStream(200, {{"Content-Type", "text/event-stream"}});
    for (int i = 0; i < n; ++i) {
      std::string event;
      if (tgi) {
        Json e = {{"index", i}, {"token", {{"id", 7}, {"text", "x"}, {"special", false}}},
                  {"generated_text", nullptr}, {"details", nullptr}};
        if (i + 1 == n) {
          e["generated_text"] = std::string(static_cast<size_t>(n), 'x');
          e["details"] = {{"finish_reason", "length"}, {"generated_tokens", n},
                          {"input_length", static_cast<int>(prompt.size())}};
        }
        event = "data:" + e.dump() + "\n\n";
      } else {
        Json e = {{"choices", {{{"index", 0}, {"text", "x"}}}}};
        event = "data: " + e.dump() + "\n\n";
      }
      const size_t half = event.size() / 2;
      w->WriteChunk(event.substr(0, half));
      w->WriteChunk(event.substr(half));
    }
    if (!tgi) {
      Json usage = {{"choices", Json::array()},
                    {"usage", {{"prompt_tokens", 3}, {"completion_tokens", n}}}};
      w->WriteChunk("data: " + usage.dump() + "\n\ndata: [DONE]\n\n");
    }
    w->EndStream();
  }

  std::mutex mu_;
  std::string last_body_;
  std::string last_authorization_;
  std::unique_ptr<http::Server> server_;
};

HttpSseClientOptions Options(int port, HttpApi api) {
  HttpSseClientOptions options;
  options.target.host = "127.0.0.1";
  options.target.port = port;
  options.api = api;
  options.threads = 4;
  options.timeout_ms = 10000;
  return options;
}

TEST(HttpSseClientTest, TgiStreamsAreTimedPerTokenAndCountedFromDetails) {
  FakeServer server;
  HttpSseClientOptions options = Options(server.port(), HttpApi::kTgi);
  options.api_key = "k1";
  HttpSseClient client(options);
  std::vector<LoadRequest> requests(12);
  for (int i = 0; i < 12; ++i) {
    requests[i].text = i == 5 ? "busy now" : "prompt " + std::to_string(i);
    requests[i].max_new_tokens = 1 + i % 4;
  }
  LoadRunResult result = RunLoad(client, requests, std::vector<double>(12, 0.0), 4);
  for (int i = 0; i < 12; ++i) {
    const RequestRecord& r = result.records[i];
    if (i == 5) {
      EXPECT_FALSE(r.success);
      EXPECT_EQ(r.error, "http 429: queue full");
      continue;
    }
    ASSERT_TRUE(r.success) << i << ": " << r.error;
    EXPECT_EQ(r.output_tokens, 1 + i % 4);
    EXPECT_EQ(static_cast<int>(r.token_times_s.size()), 1 + i % 4);
    EXPECT_EQ(r.prompt_tokens, static_cast<int>(requests[i].text.size()));  // input_length
    EXPECT_GE(r.first_token_s, r.send_s);
    EXPECT_GE(r.end_s, r.first_token_s);
  }
  Json sent = Json::parse(server.last_body());
  EXPECT_EQ(sent["parameters"]["ignore_eos"], true);
  EXPECT_EQ(sent["parameters"]["details"], true);
  EXPECT_EQ(sent["parameters"]["do_sample"], false);
  EXPECT_EQ(server.last_authorization(), "Bearer k1");
  const ServingSummary s = SummarizeRequests(result.records, result.duration_s, Slo{});
  EXPECT_EQ(s.completed, 11);
  EXPECT_EQ(s.failures.at("http 429"), 1);
  EXPECT_EQ(s.output_length_mismatches, 0);
}

TEST(HttpSseClientTest, OpenAiStreamsUseUsageAndDone) {
  FakeServer server;
  HttpSseClientOptions options = Options(server.port(), HttpApi::kOpenAI);
  options.model = "m";
  HttpSseClient client(options);
  std::vector<LoadRequest> requests(3);
  for (int i = 0; i < 3; ++i) {
    requests[i].text = "hello";
    requests[i].max_new_tokens = 5;
  }
  LoadRunResult result = RunLoad(client, requests, {0, 0, 0}, 0);
  for (const RequestRecord& r : result.records) {
    ASSERT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.output_tokens, 5);
    EXPECT_EQ(r.token_times_s.size(), 5u);  // the usage chunk carries no token
    EXPECT_EQ(r.prompt_tokens, 3);
  }
  Json sent = Json::parse(server.last_body());
  EXPECT_EQ(sent["stream"], true);
  EXPECT_EQ(sent["ignore_eos"], true);
  EXPECT_EQ(sent["model"], "m");
  EXPECT_EQ(sent["stream_options"]["include_usage"], true);
}

TEST(HttpSseClientTest, TokenizeReadsSpans) {
  FakeServer server;
  HttpSseClient client(Options(server.port(), HttpApi::kTgi));
  auto t = client.Tokenize("abc");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ids, (std::vector<int32_t>{'a', 'b', 'c'}));
  ASSERT_EQ(t->spans.size(), 3u);
  EXPECT_EQ(t->spans[2], std::make_pair(2, 3));
}

TEST(HttpSseClientTest, ConnectionRefusedIsAFailedRequest) {
  int port = 0;
  {
    FakeServer server;
    port = server.port();
  }  // closed: nothing listens there now
  HttpSseClient client(Options(port, HttpApi::kTgi));
  std::vector<LoadRequest> requests(1);
  requests[0].text = "x";
  LoadRunResult result = RunLoad(client, requests, {0}, 1);
  EXPECT_FALSE(result.records[0].success);
  EXPECT_EQ(result.records[0].error.rfind("http connect: ", 0), 0u) << result.records[0].error;
}

}  // namespace
}  // namespace blossom
