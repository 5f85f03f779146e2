// The fixture of the gateway's in-process tests (gateway_test, gateway_lifecycle_test; and
// gateway_signal_test's backend): a fake blossom.v1.Blossom callback service on 127.0.0.1:0, the
// gateway behind the real HTTP server, and raw-socket HTTP clients. Header-only, as the
// fixture's members are all defined in its classes.
#ifndef BLOSSOM_CLIENTS_GATEWAY_GATEWAY_TEST_UTIL_H_
#define BLOSSOM_CLIENTS_GATEWAY_GATEWAY_TEST_UTIL_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clients/gateway/gateway.h"
#include "clients/gateway/json_fields.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/stream_request.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "server/http/http_server.h"
#include "server/http/test_client.h"

namespace blossom::gateway::testing {

using ::blossom::http::testing::Client;
namespace v1 = ::blossom::v1;

// A loopback port with nothing listening on it (bound, read back, closed): a dead backend's
// address, or a port for a process to bind next.
inline int UnusedLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Prompt conventions understood by the fake backend:
//   "fail:<grpc code>:<message>"  the call fails with that status (before any stream message)
//   "hang"                         the call never finishes until cancelled (streams send one
//                                  message first)
//   "midway-fail:<code>:<message>" streams send one message, then fail with that status
//   anything else                  text "Hello" in two tokens ("Hel", "lo"), finish reason length
//                                  (BeamSearch: beam_width such beams); Generate with
//                                  sampling.logprobs > 0 ranks "A" above each token
// Tokenize: one token per byte, or the text's "fail:" status.
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
      if (request->sampling().logprobs() > 0) {
        for (v1::Token& token : *response->mutable_tokens()) AddAlternatives(&token);
      }
      FillFinal(response->mutable_final());
    }
    reactor->FinishOnce(status);
    return reactor;
  }

  // beam_width beams of "Hello" (as Generate's), or the prompt's "fail:" status; the request
  // counts in requests() and is kept in beam_requests().
  grpc::ServerUnaryReactor* BeamSearch(grpc::CallbackServerContext* context,
                                       const v1::BeamSearchRequest* request,
                                       v1::BeamSearchResponse* response) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++requests_;
      beam_requests_.push_back(*request);
      last_authorization_ = Authorization(context);
      cv_.notify_all();
    }
    auto* reactor = new UnaryReactor(this);
    grpc::Status status = StatusFor(request->text());
    if (status.ok()) {
      for (int i = 0; i < request->beam_width(); ++i) {
        v1::Beam* beam = response->add_beams();
        beam->set_text("Hello");
        AddToken(beam->add_tokens(), 1, "Hel");
        AddToken(beam->add_tokens(), 2, "lo");
        beam->set_finish_reason(v1::FINISH_REASON_LENGTH);
      }
      response->mutable_usage()->set_prompt_tokens(3);
      response->mutable_usage()->set_generated_tokens(2 * request->beam_width());
    }
    reactor->FinishOnce(status);
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++tokenize_requests_;
    }
    const grpc::Status status = StatusFor(request->text());
    if (!status.ok()) {
      auto* reactor = context->DefaultReactor();
      reactor->Finish(status);
      return reactor;
    }
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
  int tokenize_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return tokenize_requests_;
  }
  v1::GenerateRequest last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  std::vector<v1::GenerateRequest> all_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return all_requests_;
  }
  std::vector<v1::BeamSearchRequest> beam_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return beam_requests_;
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
  int tokenize_requests_ = 0;
  std::vector<v1::GenerateRequest> all_requests_;
  std::vector<v1::BeamSearchRequest> beam_requests_;
  std::string required_authorization_;

 private:
  // gRPC allows one Finish per call, and OnCancel may come after Finish was called (a client
  // that cancels, or a server shutting down, before OnDone): each reactor finishes once.
  class UnaryReactor : public grpc::ServerUnaryReactor {
   public:
    explicit UnaryReactor(FakeBlossom* fake) : fake_(fake) {}
    void FinishOnce(const grpc::Status& status) {
      if (!finished_.exchange(true)) Finish(status);
    }
    void OnCancel() override {
      fake_->Cancelled();
      FinishOnce(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    FakeBlossom* fake_;
    std::atomic<bool> finished_{false};
  };

  class StreamReactor : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
   public:
    StreamReactor(FakeBlossom* fake, const std::string& prompt)
        : fake_(fake), prompt_(prompt), midway_(absl::StrContains(prompt, "midway-fail:")) {
      grpc::Status status = midway_ ? grpc::Status::OK : StatusFor(prompt);
      if (!status.ok()) {
        FinishOnce(status);
        return;
      }
      messages_.resize(prompt == "hang" || midway_ ? 1 : 2);
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
      } else if (midway_) {
        FinishOnce(StatusFor(prompt_));
      } else if (prompt_ != "hang") {
        FinishOnce(grpc::Status::OK);
      }
    }
    void OnCancel() override {
      fake_->Cancelled();
      FinishOnce(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    void FinishOnce(const grpc::Status& status) {
      if (!finished_.exchange(true)) Finish(status);
    }
    std::atomic<bool> finished_{false};
    FakeBlossom* fake_;
    std::string prompt_;
    const bool midway_;  // a "midway-fail:" prompt
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
  // "A" ranked first, then the token itself (the server's top list holds the chosen token
  // where it ranks). OpenAI's top_logprobs map shows the token first, where sorted keys would
  // put "A".
  static void AddAlternatives(v1::Token* token) {
    auto* first = token->add_top_logprobs();
    first->set_token_id(65);
    first->set_token("A");
    first->set_logprob(-0.25f);
    auto* itself = token->add_top_logprobs();
    itself->set_token_id(token->id());
    itself->set_token(token->text());
    itself->set_logprob(token->logprob());
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
    all_requests_.push_back(request);
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

// POSTs `body` to `path` on a new connection and reads the stream's head and first event.
inline std::unique_ptr<Client> OpenStream(int port, const std::string& path, const std::string& body) {
  auto client = std::make_unique<Client>(port);
  EXPECT_TRUE(client->Send(absl::StrCat("POST ", path, " HTTP/1.1\r\nContent-Length: ",
                                        body.size(), "\r\n\r\n", body)));
  Client::Reply head;
  EXPECT_TRUE(client->ReadHead(&head));
  EXPECT_EQ(head.status, 200) << path;
  std::string chunk;
  EXPECT_TRUE(client->ReadChunk(&chunk)) << path;
  EXPECT_TRUE(absl::StrContains(chunk, "Hel")) << chunk;
  return client;
}

// The rest of a stream opened by OpenStream: its chunks, and whether its last chunk came.
inline Client::Reply RestOfStream(Client& client) {
  Client::Reply reply;
  reply.headers["transfer-encoding"] = "chunked";
  EXPECT_TRUE(client.ReadBody(&reply));
  return reply;
}

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

  // After a choice failed beside a "hang" one: the gateway cancelled the hanging call, so it
  // holds no call (the call would never end otherwise), and a backend that had received it saw
  // the cancellation. (Under load the failure can come before the "hang" call reaches the
  // backend, which then never sees it.)
  void ExpectTheHangingChoiceCancelled() {
    for (int i = 0; i < 100 && gateway_->pending_calls() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(gateway_->pending_calls(), 0) << "a choice still runs";
    if (fake_.requests() >= 2) {
      EXPECT_TRUE(fake_.WaitFor([&] { return fake_.cancelled_ >= 1; }));
    }
  }

  void StartGateway(GatewayOptions options, int backend_port = 0) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", backend_port ? backend_port : grpc_port_),
                                       grpc::InsecureChannelCredentials());
    // A second start replaces the first: the old server, whose handlers hold the old gateway,
    // goes first.
    http_.reset();
    gateway_ = std::make_unique<Gateway>(channel, std::move(options));
    http::ServerOptions http_options;
    http_options.max_body_bytes = 4096;
    http_options.error_response = [g = gateway_.get()](int status, const std::string& message,
                                                       const std::string& target) {
      return g->ProtocolErrorResponse(status, message, target);
    };
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

}  // namespace blossom::gateway::testing

#endif  // BLOSSOM_CLIENTS_GATEWAY_GATEWAY_TEST_UTIL_H_
