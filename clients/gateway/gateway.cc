#include "clients/gateway/gateway.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/backend_channel.h"
#include "clients/gateway/json_fields.h"
#include "clients/gateway/openapi.h"
#include "clients/gateway/openai_api.h"
#include "clients/gateway/stream_call.h"
#include "clients/gateway/tgi_api.h"
#include "server/grpc_status.h"
#include "spdlog/spdlog.h"

namespace blossom::gateway {
namespace {

using http::Response;
using http::ResponseWriter;

const std::vector<std::pair<std::string, std::string>>& SseHeaders() {
  static const auto* headers = new std::vector<std::pair<std::string, std::string>>{
      {"Content-Type", "text/event-stream"},
      {"Cache-Control", "no-cache"},
      {"X-Accel-Buffering", "no"}};
  return *headers;
}

Response JsonResponse(int status, const Json& body) {
  return Response{status, {{"Content-Type", "application/json"}}, Dump(body)};
}

constexpr char kLoadingOrDraining[] = "backend not ready: it is loading or draining";

int64_t UnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

// What gRPC accepts in an ASCII metadata value (visible characters and space); anything else
// trips a precondition that aborts the process ("Illegal header value").
bool IsValidMetadataValue(absl::string_view value) {
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// Records each response's status by route for /metrics; forwards everything else.
class MeteredWriter : public ResponseWriter {
 public:
  MeteredWriter(std::shared_ptr<ResponseWriter> inner, std::string route, GatewayMetrics* metrics)
      : inner_(std::move(inner)), route_(std::move(route)), metrics_(metrics) {}
  bool Send(Response response) override {
    metrics_->RecordRequest(route_, response.status);
    return inner_->Send(std::move(response));
  }
  bool StartStream(int status, std::vector<std::pair<std::string, std::string>> headers) override {
    metrics_->RecordRequest(route_, status);
    return inner_->StartStream(status, std::move(headers));
  }
  bool WriteChunk(std::string data) override { return inner_->WriteChunk(std::move(data)); }
  bool QueueChunk(std::string data) override { return inner_->QueueChunk(std::move(data)); }
  void OnWritable(std::function<void()> callback) override {
    inner_->OnWritable(std::move(callback));
  }
  bool EndStream() override { return inner_->EndStream(); }
  void OnClose(std::function<void()> callback) override { inner_->OnClose(std::move(callback)); }
  bool closed() const override { return inner_->closed(); }

 private:
  const std::shared_ptr<ResponseWriter> inner_;
  const std::string route_;
  GatewayMetrics* const metrics_;
};

}  // namespace

template <typename Req, typename Resp>
struct Gateway::UnaryCall {
  grpc::ClientContext context;
  Req request;
  Resp response;
};

struct Gateway::Route {
  const char* name;
  const char* method;
  ApiFlavor flavor;
};

const std::map<std::string, Gateway::Route>& Gateway::RouteTable() {
  static const auto* routes = new std::map<std::string, Route>{
      {"/", {"compat_generate", "POST", ApiFlavor::kTgi}},
      {"/live", {"live", "GET", ApiFlavor::kTgi}},
      {"/health", {"health", "GET", ApiFlavor::kTgi}},
      {"/metrics", {"metrics", "GET", ApiFlavor::kTgi}},
      {"/openapi.json", {"openapi", "GET", ApiFlavor::kTgi}},
      {"/info", {"info", "GET", ApiFlavor::kTgi}},
      {"/generate", {"generate", "POST", ApiFlavor::kTgi}},
      {"/generate_stream", {"generate_stream", "POST", ApiFlavor::kTgi}},
      {"/tokenize", {"tokenize", "POST", ApiFlavor::kTgi}},
      {"/v1/models", {"models", "GET", ApiFlavor::kOpenAI}},
      {"/v1/completions", {"completions", "POST", ApiFlavor::kOpenAI}},
      {"/v1/chat/completions", {"chat_completions", "POST", ApiFlavor::kOpenAIChat}},
  };
  return *routes;
}

std::vector<Gateway::RouteSpec> Gateway::Routes() {
  std::vector<RouteSpec> out;
  for (const auto& [path, route] : RouteTable()) out.push_back({path, route.name, route.method});
  return out;
}

Gateway::Gateway(std::shared_ptr<grpc::ChannelInterface> channel, GatewayOptions options)
    : options_(std::move(options)),
      channel_(channel),
      stub_(blossom::v1::Blossom::NewStub(channel)),
      health_stub_(grpc::health::v1::Health::NewStub(channel)),
      health_watch_(channel, {blossom::v1::Blossom::service_full_name(),
                              options_.backend_api_key.empty()
                                  ? std::string()
                                  : absl::StrCat("Bearer ", options_.backend_api_key)}) {}

Gateway::~Gateway() {
  std::unique_lock<std::mutex> lock(mu_);
  calls_done_.wait(lock, [this] { return pending_calls_ == 0; });
}

void Gateway::CallStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++pending_calls_;
}

int Gateway::pending_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_calls_;
}

void Gateway::CallFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--pending_calls_ == 0) calls_done_.notify_all();
}

std::string Gateway::NextRequestId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = ++next_request_;
  }
  return absl::StrFormat("%x%012x", n, rng() & 0xffffffffffffULL);
}

std::string Gateway::ModelName(const std::string& requested) const {
  if (!options_.served_model_name.empty()) return options_.served_model_name;
  if (!requested.empty()) return requested;
  std::lock_guard<std::mutex> lock(mu_);
  return model_id_.empty() ? "blossom" : model_id_;
}

void Gateway::RememberModelId(const std::string& model_id) {
  std::lock_guard<std::mutex> lock(mu_);
  model_id_ = model_id;
}

absl::StatusOr<std::string> Gateway::ForwardedAuthorization(const http::Request& request) const {
  if (!options_.backend_api_key.empty()) return absl::StrCat("Bearer ", options_.backend_api_key);
  const std::string* value = request.Header("authorization");
  if (value == nullptr) return std::string();
  if (value->size() > kMaxForwardedAuthorizationBytes) {
    return absl::OutOfRangeError(absl::StrCat("Authorization header is longer than ",
                                              kMaxForwardedAuthorizationBytes, " bytes"));
  }
  // The server accepts what the gateway accepts ("bearer", extra spaces), but a canonical form
  // also keeps a tab between scheme and token out of the metadata.
  absl::optional<absl::string_view> token = auth::BearerToken(*value);
  std::string forwarded = token ? absl::StrCat("Bearer ", *token) : *value;
  if (!IsValidMetadataValue(forwarded)) {
    return absl::InvalidArgumentError(
        "Authorization header may only hold printable ASCII characters");
  }
  return forwarded;
}

void Gateway::SetupContext(const http::Request& request, absl::Duration timeout,
                           grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  // Handle() refused the request already if this fails: gRPC aborts the process on a value it
  // cannot carry, so only a checked value is ever added.
  absl::StatusOr<std::string> authorization = ForwardedAuthorization(request);
  if (authorization.ok() && !authorization->empty()) {
    context->AddMetadata("authorization", *authorization);
  }
}

http::Response Gateway::ProtocolErrorResponse(int status, const std::string& message,
                                              const std::string& target) {
  return ErrorResponse(absl::StartsWith(target, "/v1/") ? ApiFlavor::kOpenAI : ApiFlavor::kTgi,
                       status, message);
}

void Gateway::Handle(const http::Request& request, std::shared_ptr<ResponseWriter> raw_writer) {
  const std::map<std::string, Route>* routes = &RouteTable();
  auto it = routes->find(request.path);
  const ApiFlavor flavor = absl::StartsWith(request.path, "/v1/") ? ApiFlavor::kOpenAI : ApiFlavor::kTgi;
  auto writer = std::make_shared<MeteredWriter>(
      std::move(raw_writer), it == routes->end() ? "other" : it->second.name, &metrics_);
  if (it == routes->end()) {
    writer->Send(ErrorResponse(flavor, 404, absl::StrCat("no route for ", request.path)));
    return;
  }
  const Route& route = it->second;
  // The method first, for every route (/live too): a method a route does not have is 405 with
  // Allow, whoever asks and whatever state the gateway is in.
  const bool head_ok = request.method == "HEAD" && std::string(route.method) == "GET";
  if (request.method != route.method && !head_ok) {
    Response response = ErrorResponse(flavor, 405, absl::StrCat("use ", route.method, " for ", request.path));
    response.headers.emplace_back("Allow", route.method);
    writer->Send(std::move(response));
    return;
  }
  if (route.name == std::string("live")) {
    writer->Send(Response{200, {{"Content-Type", "text/plain"}}, "ok\n"});
    return;
  }
  if (draining_.load() && route.name != std::string("metrics")) {
    writer->Send(ErrorResponse(flavor, 503, "the gateway is shutting down"));
    return;
  }
  // /health is open like /live (vLLM's convention): a kubelet readiness probe cannot send a key,
  // and the answer reveals only whether this gateway and its backend are serving.
  if (route.name != std::string("health") && !options_.api_keys.Allows(request.Header("authorization"))) {
    Response response = ErrorResponse(flavor, 401, "missing or invalid API key");
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
    writer->Send(std::move(response));
    return;
  }
  if (absl::StatusOr<std::string> forwarded = ForwardedAuthorization(request); !forwarded.ok()) {
    const absl::Status& error = forwarded.status();
    writer->Send(ErrorResponse(flavor, error.code() == absl::StatusCode::kOutOfRange ? 431 : 400,
                               error.message()));
    return;
  }
  const std::string name = route.name;
  if (name == "metrics") {
    writer->Send(Response{200, {{"Content-Type", "text/plain; version=0.0.4"}}, metrics_.Text()});
  } else if (name == "openapi") {
    writer->Send(Response{200, {{"Content-Type", "application/json"}}, OpenApiJson()});
  } else if (name == "health") {
    HandleHealth(request, writer);
  } else if (name == "info" || name == "models") {
    HandleModelInfo(request, writer, name);
  } else if (name == "completions" || name == "chat_completions") {
    HandleCompletions(request, writer, name == "chat_completions");
  } else if (name == "generate" || name == "generate_stream") {
    HandleTgiGenerate(request, writer, name == "generate_stream", /*as_list=*/false,
                      /*compat=*/false);
  } else if (name == "compat_generate") {
    absl::StatusOr<Json> body = ParseJsonObject(request.body);
    if (!body.ok()) {
      writer->Send(ErrorResponse(ApiFlavor::kTgi, body.status()));
      return;
    }
    absl::optional<bool> stream;
    absl::Status status = GetBool(*body, "stream", &stream);
    if (!status.ok()) {
      writer->Send(ErrorResponse(ApiFlavor::kTgi, status));
      return;
    }
    HandleTgiGenerate(request, writer, stream.value_or(false), /*as_list=*/!stream.value_or(false),
                      /*compat=*/true);
  } else if (name == "tokenize") {
    HandleTokenize(request, writer);
  }
}

void Gateway::HandleModelInfo(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                              const std::string& route) {
  auto call = std::make_shared<UnaryCall<blossom::v1::GetModelInfoRequest, blossom::v1::ModelInfo>>();
  SetupContext(request, options_.health_timeout, &call->context);
  CallStarted();
  stub_->async()->GetModelInfo(
      &call->context, &call->request, &call->response,
      [this, call, writer, route](grpc::Status status) {
        const ApiFlavor flavor = route == "models" ? ApiFlavor::kOpenAI : ApiFlavor::kTgi;
        if (status.ok()) RememberModelId(call->response.model_id());
        const std::string model = options_.served_model_name.empty()
                                      ? call->response.model_id()
                                      : options_.served_model_name;
        if (route == "health") {
          // Readiness: any failure (including auth) means this gateway cannot serve.
          if (status.ok()) {
            writer->Send(Response{200, {}, ""});
          } else {
            writer->Send(ErrorResponse(flavor, 503, absl::StrCat("backend not ready: ",
                                                                 status.error_message())));
          }
        } else if (!status.ok()) {
          writer->Send(ErrorResponse(flavor, FromGrpcStatus(status)));
        } else if (route == "info") {
          writer->Send(JsonResponse(200, tgi::InfoJson(call->response, model)));
        } else {
          Json entry = {{"id", model},
                        {"object", "model"},
                        {"created", UnixSeconds()},
                        {"owned_by", "blossom"},
                        {"root", call->response.model_id()},
                        {"max_model_len", call->response.limits().max_total_tokens()}};
          writer->Send(JsonResponse(200, {{"object", "list"}, {"data", Json::array({entry})}}));
        }
        CallFinished();
      });
}

void Gateway::HandleHealth(const http::Request& request, std::shared_ptr<ResponseWriter> writer) {
  // A probe must not report a recovered backend as down because the channel is waiting out a
  // reconnect backoff; and it waits (briefly) for the connection instead of failing fast.
  ReconnectNowIfFailing(channel_.get());
  switch (health_watch_.status()) {
    case HealthWatch::Status::kServing:
      writer->Send(Response{200, {}, ""});
      return;
    case HealthWatch::Status::kNotServing:
      writer->Send(ErrorResponse(ApiFlavor::kTgi, 503, kLoadingOrDraining));
      return;
    case HealthWatch::Status::kUnknown:
    case HealthWatch::Status::kUnimplemented:
      break;  // no watch established: ask once, as below
  }
  auto call = std::make_shared<
      UnaryCall<grpc::health::v1::HealthCheckRequest, grpc::health::v1::HealthCheckResponse>>();
  call->request.set_service(blossom::v1::Blossom::service_full_name());
  SetupContext(request, std::min(options_.health_timeout, absl::Seconds(2)), &call->context);
  call->context.set_wait_for_ready(true);
  CallStarted();
  health_stub_->async()->Check(
      &call->context, &call->request, &call->response,
      [this, call, writer, request](grpc::Status status) {
        using Serving = grpc::health::v1::HealthCheckResponse;
        if (status.ok() && call->response.status() != Serving::SERVING) {
          writer->Send(ErrorResponse(ApiFlavor::kTgi, 503, kLoadingOrDraining));
        } else if (!status.ok() && status.error_code() != grpc::StatusCode::UNIMPLEMENTED &&
                   status.error_code() != grpc::StatusCode::NOT_FOUND) {
          writer->Send(ErrorResponse(ApiFlavor::kTgi, 503,
                                     absl::StrCat("backend not ready: ", status.error_message())));
        } else if (status.ok()) {
          // SERVING: ready. No key is needed for this (the probe carries none), so no call that
          // checks one (GetModelInfo) may decide readiness.
          writer->Send(Response{200, {}, ""});
        } else {
          // A backend without the health service: GetModelInfo shows that it answers.
          HandleModelInfo(request, writer, "health");
        }
        CallFinished();
      });
}

void Gateway::HandleTokenize(const http::Request& request, std::shared_ptr<ResponseWriter> writer) {
  absl::StatusOr<blossom::v1::TokenizeRequest> parsed = tgi::ParseTokenizeRequest(request.body);
  if (!parsed.ok()) {
    writer->Send(ErrorResponse(ApiFlavor::kTgi, parsed.status()));
    return;
  }
  auto call = std::make_shared<UnaryCall<blossom::v1::TokenizeRequest, blossom::v1::TokenizeResponse>>();
  call->request = std::move(*parsed);
  SetupContext(request, options_.health_timeout, &call->context);
  CallStarted();
  stub_->async()->Tokenize(&call->context, &call->request, &call->response,
                           [this, call, writer](grpc::Status status) {
                             if (!status.ok()) {
                               writer->Send(ErrorResponse(ApiFlavor::kTgi, FromGrpcStatus(status)));
                             } else {
                               writer->Send(JsonResponse(200, tgi::TokenizeResponse(call->response)));
                             }
                             CallFinished();
                           });
}

void Gateway::HandleCompletions(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                                bool chat) {
  const ApiFlavor flavor = chat ? ApiFlavor::kOpenAIChat : ApiFlavor::kOpenAI;
  absl::StatusOr<openai::CompletionRequest> parsed =
      chat ? openai::ParseChatRequest(request.body, options_.chat_template)
           : openai::ParseCompletionRequest(request.body);
  if (!parsed.ok()) {
    writer->Send(ErrorResponse(flavor, parsed.status()));
    return;
  }
  if (!options_.served_model_name.empty()) {
    if (!parsed->model.empty() && parsed->model != options_.served_model_name) {
      writer->Send(ErrorResponse(flavor, 404,
                                 absl::StrCat("model '", parsed->model, "' does not exist"), "model"));
      return;
    }
    parsed->request.clear_model();
  }
  parsed->model = ModelName(parsed->model);
  const std::string request_id = NextRequestId();
  parsed->request.set_request_id(request_id);
  const std::string id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", request_id);
  const int64_t created = UnixSeconds();
  metrics_.AddInFlight(1);
  CallStarted();

  for (size_t k = 0; k < parsed->batch.size(); ++k) {
    blossom::v1::GenerateRequest& one = parsed->batch[k];
    if (!options_.served_model_name.empty()) one.clear_model();
    one.set_request_id(absl::StrCat(request_id, "-", k));
  }
  if (!parsed->batch.empty() && !parsed->stream) {
    HandleCompletionBatch(request, writer,
                          std::make_shared<openai::CompletionRequest>(std::move(*parsed)), id,
                          created, flavor);
    return;
  }
  if (!parsed->stream) {
    auto call = std::make_shared<UnaryCall<blossom::v1::GenerateRequest, blossom::v1::GenerateResponse>>();
    call->request = parsed->request;
    SetupContext(request, options_.request_timeout, &call->context);
    std::weak_ptr<UnaryCall<blossom::v1::GenerateRequest, blossom::v1::GenerateResponse>> weak = call;
    writer->OnClose([this, weak] {
      if (auto c = weak.lock()) {
        metrics_.RecordCancelled();
        c->context.TryCancel();
      }
    });
    auto req = std::make_shared<openai::CompletionRequest>(std::move(*parsed));
    stub_->async()->Generate(&call->context, &call->request, &call->response,
                             [this, call, req, writer, id, created, flavor](grpc::Status status) {
                               if (!status.ok()) {
                                 writer->Send(ErrorResponse(flavor, FromGrpcStatus(status)));
                               } else {
                                 writer->Send(JsonResponse(
                                     200, openai::CompletionResponse(*req, call->response, id, created)));
                               }
                               metrics_.AddInFlight(-1);
                               CallFinished();
                             });
    return;
  }

  // The encoder refers to the parsed request, so the lambdas keep both alive together.
  auto parsed_request = std::make_shared<openai::CompletionRequest>(std::move(*parsed));
  auto encoder = std::make_shared<openai::StreamEncoder>(*parsed_request, id, created);
  std::vector<blossom::v1::GenerateRequest> calls = parsed_request->batch;
  if (calls.empty()) calls.push_back(parsed_request->request);
  StreamAsSse(request, writer, flavor, std::move(calls),
              {[encoder] { return encoder->Start(); },
               [encoder, parsed_request](int choice, const blossom::v1::GenerateStreamResponse& m) {
                 return encoder->OnMessage(m, choice);
               },
               [encoder](int status, absl::string_view message) {
                 return encoder->Error(status, message);
               }});
}

void Gateway::HandleCompletionBatch(const http::Request& request,
                                    std::shared_ptr<ResponseWriter> writer,
                                    std::shared_ptr<openai::CompletionRequest> req, std::string id,
                                    int64_t created, ApiFlavor flavor) {
  using Call = UnaryCall<blossom::v1::GenerateRequest, blossom::v1::GenerateResponse>;
  struct Batch {
    std::vector<std::shared_ptr<Call>> calls;  // fixed before the first call starts
    std::mutex mu;
    size_t remaining = 0;   // guarded by mu
    grpc::Status failure;   // guarded by mu: the first call's failure
  };
  auto batch = std::make_shared<Batch>();
  batch->remaining = req->batch.size();
  for (const blossom::v1::GenerateRequest& one : req->batch) {
    auto call = std::make_shared<Call>();
    call->request = one;
    SetupContext(request, options_.request_timeout, &call->context);
    batch->calls.push_back(std::move(call));
  }
  std::weak_ptr<Batch> weak = batch;
  writer->OnClose([this, weak] {
    if (auto b = weak.lock()) {
      metrics_.RecordCancelled();
      for (auto& call : b->calls) call->context.TryCancel();
    }
  });
  for (auto& call : batch->calls) {
    stub_->async()->Generate(
        &call->context, &call->request, &call->response,
        [this, batch, req, writer, id, created, flavor](grpc::Status status) {
          bool last = false, first_failure = false;
          {
            std::lock_guard<std::mutex> lock(batch->mu);
            if (!status.ok() && batch->failure.ok()) {
              batch->failure = status;
              first_failure = true;
            }
            last = --batch->remaining == 0;
          }
          // One failed choice fails the request (as vLLM): the others stop now.
          if (first_failure) {
            for (auto& other : batch->calls) other->context.TryCancel();
          }
          if (!last) return;
          if (!batch->failure.ok()) {
            writer->Send(ErrorResponse(flavor, FromGrpcStatus(batch->failure)));
          } else {
            std::vector<blossom::v1::GenerateResponse> responses;
            responses.reserve(batch->calls.size());
            for (auto& done : batch->calls) responses.push_back(std::move(done->response));
            writer->Send(JsonResponse(200, openai::CompletionResponse(*req, responses, id, created)));
          }
          metrics_.AddInFlight(-1);
          CallFinished();
        });
  }
}

void Gateway::HandleTgiGenerate(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                                bool stream, bool as_list, bool compat) {
  absl::StatusOr<tgi::GenerateRequest> parsed = tgi::ParseGenerateRequest(request.body, compat);
  if (parsed.ok() && stream && parsed->decoder_input_details) {
    // As TGI: a stream has no place for the prefill list.
    parsed = FieldError("parameters.decoder_input_details",
                        "is not supported when streaming tokens");
  }
  if (!parsed.ok()) {
    writer->Send(ErrorResponse(ApiFlavor::kTgi, parsed.status()));
    return;
  }
  const std::string request_id = NextRequestId();
  parsed->request.set_request_id(request_id);
  metrics_.AddInFlight(1);
  CallStarted();

  if (!stream) {
    auto call = std::make_shared<UnaryCall<blossom::v1::GenerateRequest, blossom::v1::GenerateResponse>>();
    call->request = parsed->request;
    SetupContext(request, options_.request_timeout, &call->context);
    std::weak_ptr<UnaryCall<blossom::v1::GenerateRequest, blossom::v1::GenerateResponse>> weak = call;
    writer->OnClose([this, weak] {
      if (auto c = weak.lock()) {
        metrics_.RecordCancelled();
        c->context.TryCancel();
      }
    });
    auto req = std::make_shared<tgi::GenerateRequest>(std::move(*parsed));
    stub_->async()->Generate(&call->context, &call->request, &call->response,
                             [this, call, req, writer, as_list](grpc::Status status) {
                               if (!status.ok()) {
                                 writer->Send(ErrorResponse(ApiFlavor::kTgi, FromGrpcStatus(status)));
                               } else {
                                 Json body = tgi::GenerateResponse(*req, call->response);
                                 writer->Send(JsonResponse(200, as_list ? Json::array({body}) : body));
                               }
                               metrics_.AddInFlight(-1);
                               CallFinished();
                             });
    return;
  }

  auto parsed_request = std::make_shared<tgi::GenerateRequest>(std::move(*parsed));
  auto encoder = std::make_shared<tgi::StreamEncoder>(*parsed_request);
  StreamAsSse(request, writer, ApiFlavor::kTgi, {parsed_request->request},
              {[] { return std::string(); },
               [encoder, parsed_request](int, const blossom::v1::GenerateStreamResponse& m) {
                 return encoder->OnMessage(m);
               },
               [encoder](int status, absl::string_view message) {
                 return encoder->Error(status, message);
               }});
}

void Gateway::StreamAsSse(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                          ApiFlavor flavor, std::vector<blossom::v1::GenerateRequest> grpc_requests,
                          SseEncoder encoder) {
  // One GenerateStream call per choice, their messages relayed as they come. The callbacks of
  // different calls run concurrently: `mu` orders the encoder and the writes. Headers go out
  // with the first message, so a request refused by the server still gets a real HTTP status
  // instead of a 200 followed by an error event. The first failure ends the response (an error
  // response, or an error event after the headers) and cancels the other calls.
  struct Shared {
    SseEncoder encoder;
    std::vector<std::shared_ptr<StreamCall>> calls;  // fixed before the first call starts
    std::mutex mu;
    bool started = false;  // guarded by mu
    bool ended = false;    // guarded by mu: the response is complete (or failed)
    size_t finals_left;    // guarded by mu: calls whose final message is still to come
    size_t calls_left;     // guarded by mu: calls not done
  };
  auto shared = std::make_shared<Shared>();
  shared->encoder = std::move(encoder);
  shared->finals_left = shared->calls_left = grpc_requests.size();
  // Requires shared->mu.
  auto start_stream = [writer](Shared& sh) {
    if (sh.started) return true;
    sh.started = true;
    if (!writer->StartStream(200, SseHeaders())) return false;
    const std::string preamble = sh.encoder.preamble();
    return preamble.empty() || writer->QueueChunk(preamble);
  };
  auto cancel_all = [](Shared& sh) {
    for (auto& call : sh.calls) call->Cancel();
  };
  for (size_t k = 0; k < grpc_requests.size(); ++k) {
    const int choice = static_cast<int>(k);
    // Every write here queues without waiting (these run on gRPC's callback threads and on
    // the HTTP I/O thread); the output stays bounded because each call reads its next message
    // only once the connection is writable again (StreamCall's flow control).
    // (The lambdas hold `shared`, which holds the calls: StreamCall::OnDone drops both of its
    // lambdas, so the cycle ends with the last call.)
    auto on_message = [writer, start_stream, shared, choice](
                          const blossom::v1::GenerateStreamResponse& message) {
      Shared& sh = *shared;
      std::lock_guard<std::mutex> lock(sh.mu);
      if (sh.ended) return false;
      if (!start_stream(sh) || !writer->QueueChunk(sh.encoder.encode(choice, message))) {
        return false;
      }
      if (message.has_final() && --sh.finals_left == 0) {
        sh.ended = true;
        return writer->EndStream();
      }
      return true;
    };
    auto on_done = [this, flavor, writer, start_stream, cancel_all, shared](
                       const grpc::Status& status) {
      bool failed_now = false, last = false;
      {
        std::lock_guard<std::mutex> lock(shared->mu);
        if (!status.ok() && !shared->ended) {
          shared->ended = failed_now = true;
          absl::Status s = FromGrpcStatus(status);
          if (!shared->started) {
            shared->started = true;
            writer->Send(ErrorResponse(flavor, s));
          } else {
            writer->QueueChunk(shared->encoder.encode_error(HttpStatusFor(s, flavor), s.message()));
            writer->EndStream();
          }
        }
        last = --shared->calls_left == 0;
        if (last && !shared->ended) {
          // Every call ended well, though some sent no final message: end what was sent.
          shared->ended = true;
          start_stream(*shared);
          writer->EndStream();
        }
      }
      if (failed_now) cancel_all(*shared);
      if (last) {
        metrics_.AddInFlight(-1);
        CallFinished();
      }
    };
    auto call = std::make_shared<StreamCall>(
        std::move(on_message),
        [writer](std::function<void()> resume) { writer->OnWritable(std::move(resume)); },
        std::move(on_done));
    SetupContext(request, options_.request_timeout, call->context());
    shared->calls.push_back(std::move(call));
  }
  std::weak_ptr<Shared> weak = shared;
  writer->OnClose([this, weak] {
    if (auto sh = weak.lock()) {
      metrics_.RecordCancelled();
      for (auto& call : sh->calls) call->Cancel();
    }
  });
  for (size_t k = 0; k < grpc_requests.size(); ++k) {
    shared->calls[k]->Start(stub_.get(), grpc_requests[k]);
  }
}

}  // namespace blossom::gateway
