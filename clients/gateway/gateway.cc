#include "clients/gateway/gateway.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/backend_channel.h"
#include "clients/gateway/content_type.h"
#include "clients/gateway/gateway_internal.h"
#include "clients/gateway/json_fields.h"
#include "clients/gateway/openapi.h"
#include "clients/gateway/tgi_api.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "spdlog/spdlog.h"

namespace blossom::gateway {
namespace {

using http::Response;
using http::ResponseWriter;

constexpr char kLoadingOrDraining[] = "backend not ready: it is loading or draining";

// What gRPC accepts in an ASCII metadata value (visible characters and space); anything else
// trips a precondition that aborts the process ("Illegal header value").
bool IsValidMetadataValue(absl::string_view value) {
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// The status recorded for a response whose client had gone before it was sent (nginx's 499,
// "client closed request"): its call was cancelled for the client, and counting the cancelled
// call's 503 would page on client impatience.
constexpr int kClientClosedRequest = 499;

// Records each response's status by route for /metrics, and adds X-Request-Id to it when the
// request has an id (the generation routes): one place, so no answer of theirs (a refusal, an
// error after the call, a stream's head) goes without it. Forwards everything else.
class MeteredWriter : public ResponseWriter {
 public:
  MeteredWriter(std::shared_ptr<ResponseWriter> inner, std::string route, GatewayMetrics* metrics,
                std::string request_id)
      : inner_(std::move(inner)),
        route_(std::move(route)),
        metrics_(metrics),
        request_id_(std::move(request_id)) {}
  bool Send(Response response) override {
    metrics_->RecordRequest(route_, inner_->closed() ? kClientClosedRequest : response.status);
    if (!request_id_.empty()) response.headers.emplace_back("X-Request-Id", request_id_);
    return inner_->Send(std::move(response));
  }
  bool StartStream(int status, std::vector<std::pair<std::string, std::string>> headers) override {
    metrics_->RecordRequest(route_, inner_->closed() ? kClientClosedRequest : status);
    if (!request_id_.empty()) headers.emplace_back("X-Request-Id", request_id_);
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
  const std::string request_id_;  // "": no X-Request-Id header
};

constexpr const char* kModelPrefix = "/v1/models/";
constexpr const char* kModelRoute = "/v1/models/{model}";

// %XX escapes decoded (a model id may hold "/", which clients send as %2F); a malformed escape
// is kept as it is.
std::string PercentDecoded(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && absl::ascii_isxdigit(s[i + 1]) &&
        absl::ascii_isxdigit(s[i + 2])) {
      auto digit = [](char c) {
        return absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10;
      };
      out.push_back(static_cast<char>(digit(s[i + 1]) * 16 + digit(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

bool IsAcceptableRequestId(absl::string_view id) {
  // (A string_view, not strchr, which finds a NUL byte too: its terminator.)
  constexpr absl::string_view kPunctuation = "-_.:/+=@";
  if (id.empty() || id.size() > kMaxClientRequestIdBytes) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && kPunctuation.find(c) == absl::string_view::npos) return false;
  }
  return true;
}

struct Gateway::Route {
  const char* name;
  const char* method;
  ApiFlavor flavor;
  bool generation = false;  // has a request id (X-Request-Id), as a generation call carries one
};

const std::map<std::string, Gateway::Route>& Gateway::RouteTable() {
  static const auto* routes = new std::map<std::string, Route>{
      {"/", {"compat_generate", "POST", ApiFlavor::kTgi, true}},
      {"/live", {"live", "GET", ApiFlavor::kTgi}},
      {"/health", {"health", "GET", ApiFlavor::kTgi}},
      {"/metrics", {"metrics", "GET", ApiFlavor::kTgi}},
      {"/openapi.json", {"openapi", "GET", ApiFlavor::kTgi}},
      {"/info", {"info", "GET", ApiFlavor::kTgi}},
      {"/generate", {"generate", "POST", ApiFlavor::kTgi, true}},
      {"/generate_stream", {"generate_stream", "POST", ApiFlavor::kTgi, true}},
      {"/tokenize", {"tokenize", "POST", ApiFlavor::kTgi}},
      {"/detokenize", {"detokenize", "POST", ApiFlavor::kOpenAI}},
      {"/v1/models", {"models", "GET", ApiFlavor::kOpenAI}},
      {kModelRoute, {"model", "GET", ApiFlavor::kOpenAI}},
      {"/v1/completions", {"completions", "POST", ApiFlavor::kOpenAI, true}},
      {"/v1/chat/completions", {"chat_completions", "POST", ApiFlavor::kOpenAIChat, true}},
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
  calls_done_.wait(lock, [this] { return pending_calls_ == 0 && !model_fetch_running_; });
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

uint64_t Gateway::TrackCancel(std::function<void()> cancel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.load()) {
      cancels_.emplace(++next_cancel_, std::move(cancel));
      return next_cancel_;
    }
  }
  cancel();  // a call that starts after AbortInFlight (gRPC cancels it as it starts)
  return 0;
}

void Gateway::UntrackCancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.erase(id);
}

void Gateway::AbortInFlight() {
  std::vector<std::function<void()>> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.store(true);
    for (auto& [id, cancel] : cancels_) cancels.push_back(cancel);
  }
  // Outside mu_: a cancelled call's callback may run at once, and it takes mu_.
  for (auto& cancel : cancels) cancel();
}

absl::Status Gateway::BackendStatus(const grpc::Status& status) const {
  if (ShutDownStatus(status)) {
    return WithRetryDelay(absl::UnavailableError(kShutDownMessage), absl::Seconds(1));
  }
  absl::Status backend = FromGrpcStatus(status);
  if (IsTransportFailure(backend)) {
    // The detail is for the operator; one line a second at most while the backend is down.
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    int64_t last = last_transport_log_ms_.load();
    if (now_ms - last >= 1000 && last_transport_log_ms_.compare_exchange_strong(last, now_ms)) {
      spdlog::warn("backend unavailable: {}", status.error_message());
    }
  }
  return ForClient(std::move(backend));
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

std::string Gateway::RequestIdFor(const http::Request& request) {
  const std::string* id = request.Header("x-request-id");
  if (id != nullptr && IsAcceptableRequestId(*id)) return *id;
  return NextRequestId();
}

std::string Gateway::ModelName(const std::string& requested) const {
  if (!options_.served_model_name.empty()) return options_.served_model_name;
  if (!requested.empty()) return requested;
  std::lock_guard<std::mutex> lock(mu_);
  return model_id_.empty() ? "blossom" : model_id_;
}

absl::Status Gateway::TakeServedModel(std::string* model) const {
  if (options_.served_model_name.empty()) return absl::OkStatus();
  if (!model->empty() && *model != options_.served_model_name) {
    return UnknownModelError(absl::StrCat("model '", *model, "' does not exist"));
  }
  model->clear();
  return absl::OkStatus();
}

void Gateway::RememberModelId(const std::string& model_id) {
  std::lock_guard<std::mutex> lock(mu_);
  model_id_ = model_id;
}

void Gateway::LearnModelId(const http::Request& request) {
  if (!options_.served_model_name.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!model_id_.empty() || model_fetch_running_ || aborted_.load()) return;
    model_fetch_running_ = true;
  }
  auto call =
      std::make_shared<UnaryCall<blossom::v1::GetModelInfoRequest, blossom::v1::ModelInfo>>();
  SetupContext(request, options_.health_timeout, &call->context);
  stub_->async()->GetModelInfo(&call->context, &call->request, &call->response,
                               [this, call](grpc::Status status) {
                                 std::lock_guard<std::mutex> lock(mu_);
                                 if (status.ok()) model_id_ = call->response.model_id();
                                 model_fetch_running_ = false;
                                 calls_done_.notify_all();
                               });
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

const Gateway::Route* Gateway::FindRoute(absl::string_view path) {
  const std::map<std::string, Route>& routes = RouteTable();
  // OpenAI's model retrieval, /v1/models/<id>: one route whatever the id.
  const bool model_path =
      absl::StartsWith(path, kModelPrefix) && path.size() > std::strlen(kModelPrefix);
  auto it = routes.find(model_path ? std::string(kModelRoute) : std::string(path));
  return it == routes.end() ? nullptr : &it->second;
}

std::string Gateway::RouteName(absl::string_view path) {
  const Route* route = FindRoute(path);
  return route == nullptr ? "other" : route->name;
}

// Errors in the route's own API shape (vLLM's /detokenize is OpenAI-shaped); an unknown path
// by its prefix.
ApiFlavor Gateway::FlavorOf(absl::string_view path) {
  if (const Route* route = FindRoute(path)) return route->flavor;
  return absl::StartsWith(path, "/v1/") ? ApiFlavor::kOpenAI : ApiFlavor::kTgi;
}

http::Response Gateway::ProtocolErrorResponse(int status, const std::string& message,
                                              const std::string& target) {
  const absl::string_view path = absl::string_view(target).substr(0, target.find('?'));
  // A request, once its line was read; a refused connection (the caps, a head that never came)
  // is not one, and would count as 5xx requests against the gateway's error-rate alert.
  if (!target.empty()) metrics_.RecordRequest(RouteName(path), status);
  http::Response response = ErrorResponse(FlavorOf(path), status, message);
  // Every answer of a generation route carries a request id a client can quote, these too (the
  // HTTP server refused the request before the gateway saw it, so no client id is echoed).
  const Route* route = FindRoute(path);
  if (route != nullptr && route->generation) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    response.headers.emplace_back("X-Request-Id", absl::StrFormat("%016x", rng()));
  }
  return response;
}

bool Gateway::Authorized(const Route& route, const http::Request& request) const {
  const std::string name = route.name;
  // /health is open like /live (vLLM's convention): a kubelet readiness probe cannot send a key,
  // and the answer reveals only whether this gateway and its backend are serving.
  if (name == "live" || name == "health") return true;
  const std::string* authorization = request.Header("authorization");
  if (name == "metrics" && options_.metrics_api_keys.enabled()) {
    // A scrape key opens /metrics and nothing else; a client key opens it too.
    return options_.metrics_api_keys.Allows(authorization) ||
           (options_.api_keys.enabled() && options_.api_keys.Allows(authorization));
  }
  return options_.api_keys.Allows(authorization);
}

void Gateway::Handle(const http::Request& request, std::shared_ptr<ResponseWriter> raw_writer) {
  const Route* found = FindRoute(request.path);
  const ApiFlavor flavor = FlavorOf(request.path);
  // Fixed before any refusal: every answer of a generation route carries it (a 401, a drain's
  // 503 too), so a client can always quote one.
  const std::string request_id =
      found != nullptr && found->generation ? RequestIdFor(request) : std::string();
  auto writer = std::make_shared<MeteredWriter>(std::move(raw_writer), RouteName(request.path),
                                                &metrics_, request_id);
  if (found == nullptr) {
    // OpenAI's answer to an unknown URL: not model_not_found, which only an unknown model gets.
    writer->Send(ErrorResponse(flavor, 404,
                               absl::StrCat("Invalid URL (", request.method, " ", request.path,
                                            ")")));
    return;
  }
  const Route& route = *found;
  // The key before the method: a 405 with Allow to anyone would list the keyed routes and their
  // methods to callers who may use none of them.
  if (!Authorized(route, request)) {
    // OpenAI's code for it, as the server's key refusals get (invalid_api_key).
    Response response = ErrorResponse(
        flavor, WithReason(absl::UnauthenticatedError("missing or invalid API key"),
                           error_reason::kInvalidApiKey));
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
    writer->Send(std::move(response));
    return;
  }
  // A method a route does not have is 405 with Allow, whatever state the gateway is in.
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
    // With Retry-After (ErrorResponse's 503s); the HTTP server closes the connection after it
    // (EndKeepAlive), so a pooled client retries on a fresh connection, to another replica.
    writer->Send(ErrorResponse(flavor, 503, "the gateway is shutting down"));
    return;
  }
  if (absl::StatusOr<std::string> forwarded = ForwardedAuthorization(request); !forwarded.ok()) {
    const absl::Status& error = forwarded.status();
    writer->Send(ErrorResponse(flavor, error.code() == absl::StatusCode::kOutOfRange ? 431 : 400,
                               error.message()));
    return;
  }
  // Before any body is parsed: a page in the user's browser can post a form or text/plain here
  // without a CORS preflight (content_type.h).
  if (std::string(route.method) == "POST" && !AcceptsAsJson(request.Header("content-type"))) {
    writer->Send(ErrorResponse(
        flavor, 415,
        absl::StrCat("the body must be JSON: send 'Content-Type: application/json' (got '",
                     request.Header("content-type")->substr(0, 100), "')")));
    return;
  }
  const std::string name = route.name;
  if (name == "metrics") {
    writer->Send(Response{200, {{"Content-Type", "text/plain; version=0.0.4"}}, metrics_.Text()});
  } else if (name == "openapi") {
    writer->Send(Response{200, {{"Content-Type", "application/json"}}, OpenApiJson()});
  } else if (name == "health") {
    HandleHealth(request, writer);
  } else if (name == "info" || name == "models" || name == "model") {
    HandleModelInfo(request, writer, name);
  } else if (name == "completions" || name == "chat_completions") {
    HandleCompletions(request, writer, name == "chat_completions", request_id);
  } else if (name == "generate" || name == "generate_stream") {
    HandleTgiGenerate(request, writer, name == "generate_stream", /*as_list=*/false,
                      /*compat=*/false, request_id);
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
                      /*compat=*/true, request_id);
  } else if (name == "tokenize") {
    HandleTokenize(request, writer);
  } else if (name == "detokenize") {
    HandleDetokenize(request, writer);
  }
}

void Gateway::HandleModelInfo(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                              const std::string& route) {
  // /v1/models/<id>: the id asked for.
  const std::string asked =
      route == "model" ? PercentDecoded(absl::string_view(request.path).substr(std::strlen(kModelPrefix)))
                       : "";
  auto call = std::make_shared<UnaryCall<blossom::v1::GetModelInfoRequest, blossom::v1::ModelInfo>>();
  SetupContext(request, options_.health_timeout, &call->context);
  CallStarted();
  const uint64_t tracked = TrackCall(call);
  stub_->async()->GetModelInfo(
      &call->context, &call->request, &call->response,
      [this, call, writer, route, asked, tracked,
       detail = ShowsBackendErrors(request)](grpc::Status status) {
        const ApiFlavor flavor =
            route == "models" || route == "model" ? ApiFlavor::kOpenAI : ApiFlavor::kTgi;
        if (status.ok()) RememberModelId(call->response.model_id());
        const std::string model = options_.served_model_name.empty()
                                      ? call->response.model_id()
                                      : options_.served_model_name;
        if (route == "health") {
          // Readiness: any failure (including auth) means this gateway cannot serve.
          writer->Send(status.ok() ? Response{200, {}, ""} : BackendNotReady(detail, status));
        } else if (!status.ok()) {
          writer->Send(ErrorResponse(flavor, BackendStatus(status)));
        } else if (route == "info") {
          writer->Send(JsonResponse(200, tgi::InfoJson(call->response, model)));
        } else {
          // vLLM's ModelCard, in its field order.
          OrderedJson entry = {{"id", model},
                               {"object", "model"},
                               {"created", UnixSeconds()},
                               {"owned_by", "blossom"},
                               {"root", call->response.model_id()},
                               {"parent", nullptr},
                               {"max_model_len", call->response.limits().max_total_tokens()}};
          if (route == "models") {
            writer->Send(JsonResponse(
                200, OrderedJson{{"object", "list"}, {"data", OrderedJson::array({entry})}}));
          } else if (asked == model || asked == call->response.model_id()) {
            writer->Send(JsonResponse(200, entry));
          } else {
            // Not echoed: the path is the client's, and this answer goes to logs too.
            writer->Send(ErrorResponse(
                flavor, UnknownModelError(absl::StrCat("the model asked for is not served here; "
                                                       "this gateway serves '", model, "'"))));
          }
        }
        UntrackCancel(tracked);
        CallFinished();
      });
}

bool Gateway::ShowsBackendErrors(const http::Request& request) const {
  return options_.api_keys.Allows(request.Header("authorization"));
}

http::Response Gateway::BackendNotReady(bool detail, const grpc::Status& status) {
  if (!detail) return ErrorResponse(ApiFlavor::kTgi, 503, "backend not ready");
  return ErrorResponse(ApiFlavor::kTgi, 503,
                       absl::StrCat("backend not ready: ", status.error_message()));
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
  const uint64_t tracked = TrackCall(call);
  health_stub_->async()->Check(
      &call->context, &call->request, &call->response,
      [this, call, writer, request, tracked](grpc::Status status) {
        using Serving = grpc::health::v1::HealthCheckResponse;
        if (status.ok() && call->response.status() != Serving::SERVING) {
          writer->Send(ErrorResponse(ApiFlavor::kTgi, 503, kLoadingOrDraining));
        } else if (!status.ok() && status.error_code() != grpc::StatusCode::UNIMPLEMENTED &&
                   status.error_code() != grpc::StatusCode::NOT_FOUND) {
          writer->Send(BackendNotReady(ShowsBackendErrors(request), status));
        } else if (status.ok()) {
          // SERVING: ready. No key is needed for this (the probe carries none), so no call that
          // checks one (GetModelInfo) may decide readiness.
          writer->Send(Response{200, {}, ""});
        } else {
          // A backend without the health service: GetModelInfo shows that it answers.
          HandleModelInfo(request, writer, "health");
        }
        UntrackCancel(tracked);
        CallFinished();
      });
}

}  // namespace blossom::gateway
