// In-process gateway test: a fake blossom.v1.Blossom callback service on 127.0.0.1:0, the
// gateway behind the real HTTP server, and raw-socket HTTP clients.
#include "clients/gateway/gateway.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clients/gateway/json_fields.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/stream_request.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "server/http/http_server.h"
#include "server/http/test_client.h"

namespace blossom::gateway {
namespace {

using ::blossom::http::testing::Client;
namespace v1 = ::blossom::v1;

// Prompt conventions understood by the fake backend:
//   "fail:<grpc code>:<message>"  the call fails with that status (before any stream message)
//   "hang"                         the call never finishes until cancelled (streams send one
//                                  message first)
//   anything else                  text "Hello" in two tokens ("Hel", "lo"), finish reason length
class FakeBlossom : public v1::Blossom::CallbackService {
 public:
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override {
    Seen(context, *request);
    auto* reactor = new UnaryReactor(this);
    if (request->text() == "hang") return reactor;  // finished by OnCancel
    grpc::Status status = StatusFor(request->text());
    if (status.ok()) {
      response->set_text("Hello");
      AddToken(response->add_tokens(), 1, "Hel");
      AddToken(response->add_tokens(), 2, "lo");
      FillFinal(response->mutable_final());
    }
    reactor->Finish(status);
    return reactor;
  }

  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateStreamRequest* request) override {
    Seen(context, v1::FromStreamRequest(*request));
    return new StreamReactor(this, request->text());
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override {
    for (size_t i = 0; i < request->text().size(); ++i) {
      response->add_ids(static_cast<unsigned char>(request->text()[i]));
      response->add_tokens(request->text().substr(i, 1));
      auto* span = response->add_offsets();
      span->set_start(static_cast<int>(i));
      span->set_end(static_cast<int>(i + 1));
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest*, v1::ModelInfo* info) override {
    bool authorized = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_authorization_ = Authorization(context);
      authorized = required_authorization_.empty() || last_authorization_ == required_authorization_;
    }
    if (!authorized) {
      auto* reactor = context->DefaultReactor();
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid API key"));
      return reactor;
    }
    info->set_model_id("bloom-test");
    info->set_dtype("float32");
    info->set_backend("cpu");
    info->mutable_limits()->set_max_total_tokens(2048);
    info->mutable_limits()->set_max_input_tokens(1024);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(ready_ ? grpc::Status::OK : grpc::Status(grpc::StatusCode::UNAVAILABLE, "loading"));
    return reactor;
  }

  // Waits (bounded) until pred holds under the lock.
  bool WaitFor(const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), pred);
  }
  int cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  int requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  v1::GenerateRequest last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  std::string last_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_authorization_;
  }
  // GetModelInfo answers UNAUTHENTICATED unless its authorization metadata is this ("": any).
  void set_required_authorization(std::string value) {
    std::lock_guard<std::mutex> lock(mu_);
    required_authorization_ = std::move(value);
  }
  std::atomic<bool> ready_{true};

  // Guarded by mu_; public for WaitFor predicates.
  std::mutex mu_;
  std::condition_variable cv_;
  int cancelled_ = 0;
  int requests_ = 0;
  std::string required_authorization_;

 private:
  class UnaryReactor : public grpc::ServerUnaryReactor {
   public:
    explicit UnaryReactor(FakeBlossom* fake) : fake_(fake) {}
    void OnCancel() override {
      fake_->Cancelled();
      Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    FakeBlossom* fake_;
  };

  class StreamReactor : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
   public:
    StreamReactor(FakeBlossom* fake, const std::string& prompt) : fake_(fake), prompt_(prompt) {
      grpc::Status status = StatusFor(prompt);
      if (!status.ok()) {
        Finish(status);
        return;
      }
      messages_.resize(prompt == "hang" ? 1 : 2);
      messages_[0].set_text_delta("Hel");
      AddToken(messages_[0].mutable_token(), 1, "Hel");
      if (messages_.size() == 2) {
        messages_[1].set_text_delta("lo");
        AddToken(messages_[1].mutable_token(), 2, "lo");
        FillFinal(messages_[1].mutable_final());
      }
      StartWrite(&messages_[0]);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) return;  // cancelled; OnCancel/OnDone follow
      if (++next_ < messages_.size()) {
        StartWrite(&messages_[next_]);
      } else if (prompt_ != "hang") {
        Finish(grpc::Status::OK);
      }
    }
    void OnCancel() override {
      fake_->Cancelled();
      Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    FakeBlossom* fake_;
    std::string prompt_;
    std::vector<v1::GenerateStreamResponse> messages_;
    size_t next_ = 0;
  };

  static std::string Authorization(grpc::CallbackServerContext* context) {
    auto it = context->client_metadata().find("authorization");
    return it == context->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
  }
  // "fail:<code>:<message>[|<field>|<reason>|<retry seconds>]": the status the real server
  // would send, details in grpc-status-details-bin. Found anywhere in the prompt (a chat
  // prompt starts with the template's role prefix), up to the end of its line.
  static grpc::Status StatusFor(const std::string& prompt) {
    const size_t at = prompt.find("fail:");
    if (at == std::string::npos) return grpc::Status::OK;
    const std::string spec = prompt.substr(at, prompt.find('\n', at) - at);
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 2));
    int code = 2;
    (void)absl::SimpleAtoi(parts[1], &code);
    std::vector<std::string> detail = absl::StrSplit(parts.size() > 2 ? parts[2] : "", '|');
    absl::Status status(static_cast<absl::StatusCode>(code), detail[0]);
    if (detail.size() > 1 && !detail[1].empty()) {
      status = WithFieldViolation(status, detail[1], detail[0]);
    }
    if (detail.size() > 2 && !detail[2].empty()) status = WithReason(status, detail[2]);
    int retry_seconds = 0;
    if (detail.size() > 3 && absl::SimpleAtoi(detail[3], &retry_seconds)) {
      status = WithRetryDelay(status, absl::Seconds(retry_seconds));
    }
    return ToGrpcStatus(status);
  }
  static void AddToken(v1::Token* token, int id, const std::string& text) {
    token->set_id(id);
    token->set_text(text);
    token->set_logprob(-0.5f);
  }
  static void FillFinal(v1::FinalInfo* final) {
    final->set_finish_reason(v1::FINISH_REASON_LENGTH);
    final->mutable_usage()->set_prompt_tokens(3);
    final->mutable_usage()->set_generated_tokens(2);
    final->set_seed(7);
  }
  void Seen(grpc::CallbackServerContext* context, const v1::GenerateRequest& request) {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    last_request_ = request;
    last_authorization_ = Authorization(context);
    cv_.notify_all();
  }
  void Cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    ++cancelled_;
    cv_.notify_all();
  }

  v1::GenerateRequest last_request_;
  std::string last_authorization_;
};

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port_);
    builder.RegisterService(&fake_);
    grpc_server_ = builder.BuildAndStart();
    ASSERT_NE(grpc_server_, nullptr);
    ASSERT_GT(grpc_port_, 0);
    SetBackendServing(true);
  }

  void StartGateway(GatewayOptions options, int backend_port = 0) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", backend_port ? backend_port : grpc_port_),
                                       grpc::InsecureChannelCredentials());
    gateway_ = std::make_unique<Gateway>(channel, std::move(options));
    http::ServerOptions http_options;
    http_options.max_body_bytes = 4096;
    http_options.error_response = &Gateway::ProtocolErrorResponse;
    auto server = http::Server::Start(http_options, [g = gateway_.get()](const http::Request& r,
                                                             std::shared_ptr<http::ResponseWriter> w) {
      g->Handle(r, std::move(w));
    });
    ASSERT_TRUE(server.ok()) << server.status();
    http_ = std::move(*server);
  }

  // The backend's grpc.health.v1 status, as blossom-server sets it (false: loading/draining).
  void SetBackendServing(bool serving) {
    grpc_server_->GetHealthCheckService()->SetServingStatus(v1::Blossom::service_full_name(), serving);
  }

  void TearDown() override {
    if (http_) http_->Stop();
    gateway_.reset();
    if (grpc_server_) grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  Client::Reply Request(const std::string& method, const std::string& path, const std::string& body,
                        const std::string& extra_headers = "") {
    Client client(http_->port());
    EXPECT_TRUE(client.Send(absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: t\r\n", extra_headers,
                                         "Content-Length: ", body.size(), "\r\n\r\n", body)));
    Client::Reply reply;
    EXPECT_TRUE(client.ReadReply(&reply)) << method << " " << path;
    return reply;
  }

  // GET /health until it answers `status` (bounded: the watched status arrives asynchronously);
  // the last reply.
  Client::Reply HealthWithin(int status) {
    Client::Reply reply = Request("GET", "/health", "");
    for (int i = 0; i < 200 && reply.status != status; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      reply = Request("GET", "/health", "");
    }
    return reply;
  }

  // SSE "data:" payloads of a streamed body.
  static std::vector<std::string> Events(const std::string& body) {
    std::vector<std::string> events;
    for (absl::string_view e : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
      EXPECT_TRUE(absl::StartsWith(e, "data:")) << e;
      events.emplace_back(absl::StripLeadingAsciiWhitespace(e.substr(5)));
    }
    return events;
  }

  FakeBlossom fake_;
  int grpc_port_ = 0;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<http::Server> http_;
};

TEST_F(GatewayTest, UnaryCompletion) {
  GatewayOptions options;
  options.served_model_name = "bloom";
  StartGateway(options);
  Client::Reply reply = Request("POST", "/v1/completions",
                                R"({"model":"bloom","prompt":"hi","max_tokens":2,"logprobs":0})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers["content-type"], "application/json");
  Json j = Json::parse(reply.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "bloom");
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "cmpl-"));
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], Json({"Hel", "lo"}));
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  v1::GenerateRequest seen = fake_.last_request();
  EXPECT_EQ(seen.text(), "hi");
  EXPECT_EQ(seen.stopping().max_new_tokens(), 2);
  EXPECT_EQ(seen.model(), "");  // the gateway checked the served name itself
  EXPECT_FALSE(seen.request_id().empty());

  Client::Reply wrong = Request("POST", "/v1/completions", R"({"model":"gpt-4","prompt":"hi"})");
  EXPECT_EQ(wrong.status, 404);
  EXPECT_EQ(Json::parse(wrong.body)["error"]["param"], "model");
}

TEST_F(GatewayTest, ChatStreamEndsWithDone) {
  StartGateway({});
  Client::Reply reply = Request(
      "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers["content-type"], "text/event-stream");
  std::vector<std::string> events = Events(reply.body);
  ASSERT_GE(events.size(), 4u) << reply.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json chunk = Json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content")) {
      content += chunk["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Hello");
  Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(fake_.last_request().text(), "User: hi\nAssistant:");
}

TEST_F(GatewayTest, TgiGenerateAndStream) {
  StartGateway({});
  Client::Reply unary = Request("POST", "/generate", R"({"inputs":"hi","parameters":{"details":true}})");
  ASSERT_EQ(unary.status, 200) << unary.body;
  Json j = Json::parse(unary.body);
  EXPECT_EQ(j["generated_text"], "Hello");
  EXPECT_EQ(j["details"]["generated_tokens"], 2);
  EXPECT_EQ(fake_.last_request().sampling().temperature(), 0.0f);  // greedy by default

  Client::Reply stream = Request("POST", "/generate_stream", R"({"inputs":"hi"})");
  ASSERT_EQ(stream.status, 200) << stream.body;
  std::vector<std::string> events = Events(stream.body);
  ASSERT_EQ(events.size(), 2u) << stream.body;
  EXPECT_EQ(Json::parse(events[0])["token"]["text"], "Hel");
  EXPECT_TRUE(Json::parse(events[0])["generated_text"].is_null());
  EXPECT_EQ(Json::parse(events[1])["generated_text"], "Hello");

  // TGI's "/" route, as the text-generation Python client uses it.
  Client::Reply compat = Request("POST", "/", R"({"inputs":"hi","stream":false})");
  ASSERT_EQ(compat.status, 200) << compat.body;
  EXPECT_EQ(Json::parse(compat.body)[0]["generated_text"], "Hello");
  Client::Reply compat_stream = Request("POST", "/", R"({"inputs":"hi","stream":true})");
  ASSERT_EQ(compat_stream.status, 200) << compat_stream.body;
  EXPECT_EQ(Events(compat_stream.body).size(), 2u);

  Client::Reply tokens = Request("POST", "/tokenize", R"({"inputs":"ab"})");
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  EXPECT_EQ(Json::parse(tokens.body)[1]["text"], "b");

  Client::Reply info = Request("GET", "/info", "");
  ASSERT_EQ(info.status, 200);
  EXPECT_EQ(Json::parse(info.body)["model_id"], "bloom-test");
  EXPECT_EQ(Json::parse(info.body)["max_total_tokens"], 2048);
}

TEST_F(GatewayTest, MapsBackendStatusToHttp) {
  StartGateway({});
  struct Case {
    std::string path, body;
    int status;
  };
  auto completion = [](const std::string& prompt, bool stream) {
    return absl::StrCat(R"({"prompt":")", prompt, R"(","stream":)", stream ? "true" : "false", "}");
  };
  auto tgi = [](const std::string& prompt) { return absl::StrCat(R"({"inputs":")", prompt, R"("})"); };
  const Case cases[] = {
      {"/v1/completions", completion("fail:3:bad value", false), 400},
      // The message is no longer read: "too long" without details is a plain 400.
      {"/v1/completions", completion("fail:3:prompt is too long", false), 400},
      {"/v1/completions", completion("fail:11:prompt is too long|text|PROMPT_TOO_LONG", false), 400},
      {"/v1/completions", completion("fail:11:prompt is too long|text|PROMPT_TOO_LONG", true), 400},
      {"/generate", tgi("fail:11:prompt is too long|text|PROMPT_TOO_LONG"), 422},
      {"/generate_stream", tgi("fail:11:prompt is too long|text|PROMPT_TOO_LONG"), 422},
      {"/v1/completions", completion("fail:16:who", false), 401},
      {"/v1/completions", completion("fail:5:no model", false), 404},
      {"/v1/completions", completion("fail:14:draining", true), 503},
      {"/v1/completions", completion("fail:4:late", true), 504},
      {"/v1/completions", completion("fail:13:boom", false), 500},
      {"/generate", tgi("fail:3:bad value"), 422},
      {"/generate_stream", tgi("fail:8:queue full|||1"), 429},
      // RESOURCE_EXHAUSTED without RetryInfo is gRPC's own size limit: retrying cannot help.
      {"/generate", tgi("fail:8:Received message larger than max"), 413},
  };
  for (const Case& c : cases) {
    Client::Reply reply = Request("POST", c.path, c.body);
    EXPECT_EQ(reply.status, c.status) << c.path << " " << c.body;
    Json j = Json::parse(reply.body);
    if (absl::StartsWith(c.path, "/v1/")) {
      EXPECT_TRUE(j["error"].contains("message")) << reply.body;
      EXPECT_TRUE(j["error"].contains("type")) << reply.body;
    } else {
      EXPECT_TRUE(j.contains("error_type")) << reply.body;
    }
  }
  Client::Reply busy =
      Request("POST", "/v1/completions", completion("fail:8:queue full||QUEUE_FULL|2", false));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.headers["retry-after"], "2");  // from the server's RetryInfo
  EXPECT_EQ(Json::parse(busy.body)["error"]["message"], "queue full");
  EXPECT_EQ(Json::parse(busy.body)["error"]["code"], "queue_full");
  Client::Reply loading =
      Request("POST", "/generate", tgi("fail:14:the model is loading||MODEL_LOADING|5"));
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.headers["retry-after"], "5");
}

// The server's BadRequest field and ErrorInfo reason become OpenAI's param and code, in the
// route's own field names.
TEST_F(GatewayTest, BackendDetailsFillParamAndCode) {
  StartGateway({});
  Client::Reply completion = Request(
      "POST", "/v1/completions",
      R"({"prompt":"fail:11:prompt is too long|text|PROMPT_TOO_LONG","max_tokens":3})");
  EXPECT_EQ(completion.status, 400);
  Json c = Json::parse(completion.body);
  EXPECT_EQ(c["error"]["param"], "prompt");
  EXPECT_EQ(c["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(c["error"]["message"], "prompt is too long");
  EXPECT_EQ(completion.headers.count("retry-after"), 0u);

  Client::Reply chat = Request(
      "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"fail:11:prompt is too long|text|PROMPT_TOO_LONG"}]})");
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(Json::parse(chat.body)["error"]["param"], "messages");

  Client::Reply max_tokens = Request(
      "POST", "/v1/completions",
      R"({"prompt":"fail:3:too many tokens|stopping.max_new_tokens|CONTEXT_LENGTH_EXCEEDED"})");
  EXPECT_EQ(max_tokens.status, 400);
  EXPECT_EQ(Json::parse(max_tokens.body)["error"]["param"], "max_tokens");

  Client::Reply stops = Request(
      "POST", "/v1/completions",
      R"({"prompt":"fail:3:too many|stopping.stop|TOO_MANY_STOP_SEQUENCES","stream":true})");
  EXPECT_EQ(stops.status, 400);
  EXPECT_EQ(Json::parse(stops.body)["error"]["param"], "stop");
  EXPECT_EQ(Json::parse(stops.body)["error"]["code"], "too_many_stop_sequences");
}

TEST_F(GatewayTest, ValidationErrorsNeverReachTheBackend) {
  StartGateway({});
  Client::Reply bad = Request("POST", "/v1/completions", R"({"prompt":"x","n":2})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Json::parse(bad.body)["error"]["param"], "n");
  Client::Reply tgi = Request("POST", "/generate", R"({"inputs":"x","parameters":{"watermark":true}})");
  EXPECT_EQ(tgi.status, 422);
  EXPECT_EQ(Json::parse(tgi.body)["error_type"], "validation");
  Client::Reply json = Request("POST", "/v1/chat/completions", "{not json");
  EXPECT_EQ(json.status, 400);
  EXPECT_EQ(fake_.requests(), 0);
  EXPECT_EQ(Request("GET", "/nope", "").status, 404);
  EXPECT_EQ(Request("GET", "/v1/completions", "").status, 405);
  // /live answers GET and HEAD only (schemathesis found TRACE answered 200).
  EXPECT_EQ(Request("TRACE", "/live", "").status, 405);
  EXPECT_EQ(Request("POST", "/live", "").status, 405);
  EXPECT_EQ(Request("GET", "/live", "").status, 200);
}

TEST_F(GatewayTest, OversizedBodiesGet413InTheApiShape) {
  StartGateway({});
  const std::string big(5000, 'a');
  Client::Reply openai = Request("POST", "/v1/completions", big);
  EXPECT_EQ(openai.status, 413);
  EXPECT_EQ(Json::parse(openai.body)["error"]["type"], "invalid_request_error");
  Client::Reply tgi = Request("POST", "/generate", big);
  EXPECT_EQ(tgi.status, 413);
  EXPECT_EQ(Json::parse(tgi.body)["error_type"], "validation");
  EXPECT_EQ(fake_.requests(), 0);
}

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
