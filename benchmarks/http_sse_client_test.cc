// The HTTP/SSE client against a fake TGI/OpenAI-shaped server built on //server/http, with
// events split across chunk boundaries, and against a raw-socket server for replies a real one
// would not send (counts of the wrong type, a stream that never ends, no TGI /tokenize); plus
// the SSE parser on its own.
#include "benchmarks/http_sse_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

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

TEST(HttpSseClientTest, ApiParsing) {
  EXPECT_EQ(*ParseHttpApi("tgi"), HttpApi::kTgi);
  EXPECT_EQ(*ParseHttpApi("openai"), HttpApi::kOpenAI);
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
  options.request_timeout_s = 10;
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

// One connection at a time on raw sockets: `reply(path, body, fd)` writes whatever it likes,
// then the connection is closed.
class RawServer {
 public:
  using Reply = std::function<void(const std::string& path, const std::string& body, int fd)>;
  explicit RawServer(Reply reply) : reply_(std::move(reply)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawServer() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  bool stopping() const { return stop_.load(); }

  static bool Write(int fd, const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  static std::string Response(int status, const std::string& type, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
  }
  // A read-to-close event stream's head.
  static constexpr char kSseHead[] =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::string in;
      char buf[4096];
      size_t head_end;
      ssize_t n = 1;
      while ((head_end = in.find("\r\n\r\n")) == std::string::npos &&
             (n = recv(fd, buf, sizeof(buf), 0)) > 0) {
        in.append(buf, static_cast<size_t>(n));
      }
      if (head_end != std::string::npos) {
        const std::string head = in.substr(0, head_end);
        const size_t path_start = head.find(' ') + 1;
        const std::string path = head.substr(path_start, head.find(' ', path_start) - path_start);
        const size_t cl = head.find("Content-Length: ");
        const size_t want = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 16));
        std::string body = in.substr(head_end + 4);
        while (body.size() < want && (n = recv(fd, buf, sizeof(buf), 0)) > 0) {
          body.append(buf, static_cast<size_t>(n));
        }
        reply_(path, body, fd);
      }
      close(fd);
    }
  }

  Reply reply_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string Prompt(const std::string& body) {
  const Json j = Json::parse(body);
  return j.contains("inputs") ? j["inputs"].get<std::string>() : j["prompt"].get<std::string>();
}

std::vector<RequestRecord> RunTexts(HttpSseClient& client, const std::vector<std::string>& texts) {
  std::vector<LoadRequest> requests(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    requests[i].text = texts[i];
    requests[i].max_new_tokens = 2;
    requests[i].prompt_tokens = 9;
  }
  return RunLoad(client, requests, std::vector<double>(texts.size(), 0.0), 1).records;
}

// --request-timeout bounds the whole request, as on gRPC: a stream whose tokens keep coming
// (every 50 ms, for 5 s) still fails at the 0.5 s deadline, as a timeout.
TEST(HttpSseClientTest, RequestTimeoutIsTheWholeRequestsDeadline) {
  RawServer server([&server](const std::string&, const std::string&, int fd) {
    RawServer::Write(fd, RawServer::kSseHead);
    for (int i = 0; i < 100 && !server.stopping(); ++i) {
      if (!RawServer::Write(fd, "data:{\"token\":{\"id\":1,\"text\":\"x\"}}\n\n")) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    RawServer::Write(fd, "data:{\"token\":{\"id\":1},\"generated_text\":\"x\"}\n\n");
  });
  HttpSseClientOptions options = Options(server.port(), HttpApi::kTgi);
  options.request_timeout_s = 0.5;
  HttpSseClient client(options);
  const RequestRecord r = RunTexts(client, {"p"})[0];
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error.rfind("http timeout: the request's 0.5 s deadline", 0), 0u) << r.error;
  EXPECT_FALSE(r.token_times_s.empty());
  EXPECT_LT(r.end_s - r.send_s, 3.0);
}

// 0 = no deadline (it used to make every poll return at once, failing the first Tokenize).
TEST(HttpSseClientTest, ZeroRequestTimeoutMeansNoDeadline) {
  FakeServer server;
  HttpSseClientOptions options = Options(server.port(), HttpApi::kTgi);
  options.request_timeout_s = 0;
  HttpSseClient client(options);
  auto t = client.Tokenize("abc");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ids.size(), 3u);
  const RequestRecord r = RunTexts(client, {"hello"})[0];
  EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(r.output_tokens, 2);
}

// Counts of the wrong type used to throw nlohmann::type_error on a worker thread, which ended the
// process; null stays "not reported" (the counted tokens are used).
TEST(HttpSseClientTest, CountsOfTheWrongTypeFailTheRequestNotTheProcess) {
  RawServer server([](const std::string& path, const std::string& body, int fd) {
    const std::string prompt = Prompt(body);
    RawServer::Write(fd, RawServer::kSseHead);
    if (path == "/generate_stream") {
      RawServer::Write(fd, "data:{\"token\":{\"id\":1}}\n\n");
      RawServer::Write(fd, "data:{\"token\":{\"id\":1},\"generated_text\":\"xx\",\"details\":" +
                               prompt + "}\n\n");
    } else {
      RawServer::Write(fd, "data: {\"choices\":[{\"text\":\"x\"}]}\n\n"
                           "data: {\"choices\":[{\"text\":\"x\"}]}\n\n"
                           "data: {\"choices\":[],\"usage\":" + prompt + "}\n\ndata: [DONE]\n\n");
    }
  });
  HttpSseClient tgi(Options(server.port(), HttpApi::kTgi));
  const std::vector<RequestRecord> t = RunTexts(
      tgi, {R"({"generated_tokens":null,"input_length":null})", R"({"generated_tokens":"2"})",
            R"({"generated_tokens":2,"input_length":1.5})", R"({"generated_tokens":-1})",
            R"({"generated_tokens":2,"input_length":4})"});
  EXPECT_TRUE(t[0].success) << t[0].error;
  EXPECT_EQ(t[0].output_tokens, 2);  // counted
  EXPECT_EQ(t[0].prompt_tokens, 9);  // as built
  EXPECT_EQ(t[1].error, R"(http bad event: details.generated_tokens is "2", not a count)");
  EXPECT_EQ(t[2].error, "http bad event: details.input_length is 1.5, not a count");
  EXPECT_EQ(t[3].error, "http bad event: details.generated_tokens is -1, not a count");
  EXPECT_TRUE(t[4].success) << t[4].error;
  EXPECT_EQ(t[4].prompt_tokens, 4);

  HttpSseClient openai(Options(server.port(), HttpApi::kOpenAI));
  const std::vector<RequestRecord> o = RunTexts(
      openai, {R"({"completion_tokens":null,"prompt_tokens":null})",
               R"({"completion_tokens":"x"})", R"({"completion_tokens":2,"prompt_tokens":[]})"});
  EXPECT_TRUE(o[0].success) << o[0].error;
  EXPECT_EQ(o[0].output_tokens, 2);
  EXPECT_EQ(o[1].error, R"(http bad event: usage.completion_tokens is "x", not a count)");
  EXPECT_EQ(o[2].error, "http bad event: usage.prompt_tokens is [], not a count");
}

// A non-JSON error body is cut to 200 bytes, but never inside a UTF-8 character (the report
// would hold invalid UTF-8).
TEST(HttpSseClientTest, ErrorBodiesAreCutOnACharacterBoundary) {
  const std::string a199(199, 'a');
  RawServer server([&](const std::string&, const std::string&, int fd) {
    RawServer::Write(fd, RawServer::Response(502, "text/html", a199 + "\xc3\xa9 and more"));
  });
  HttpSseClient client(Options(server.port(), HttpApi::kTgi));
  const RequestRecord r = RunTexts(client, {"p"})[0];
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "http 502: " + a199);
}

// Prompt building needs TGI's /tokenize; a server without it (or with another API under that
// path, as vLLM's {"prompt"} -> {"tokens"}) gets an error naming the cause, not a crash.
TEST(HttpSseClientTest, TokenizeWithoutTgiTokenizeSaysWhy) {
  std::string answer;
  RawServer server([&](const std::string&, const std::string&, int fd) {
    RawServer::Write(fd, answer);
  });
  HttpSseClient client(Options(server.port(), HttpApi::kOpenAI));
  answer = RawServer::Response(404, "application/json", R"({"error":"no route for /tokenize"})");
  auto t = client.Tokenize("abc");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("http 404 (no route for /tokenize): the server has no "
                                      "TGI-style /tokenize"),
            std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("Blossom's gateway and TGI"), std::string::npos);
  answer = RawServer::Response(200, "application/json", R"({"count":2,"tokens":[5,6]})");
  t = client.Tokenize("abc");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("not with a list of {\"id\", \"start\", \"stop\"}"),
            std::string::npos)
      << t.status();
  answer = RawServer::Response(200, "application/json", R"([{"id":"7","start":0,"stop":1}])");
  t = client.Tokenize("abc");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  // A refused text (too long, most likely) is OUT_OF_RANGE: prompt building halves its pieces.
  answer = RawServer::Response(422, "application/json", R"({"error":"too long"})");
  t = client.Tokenize("abc");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kOutOfRange) << t.status();
}

}  // namespace
}  // namespace blossom
