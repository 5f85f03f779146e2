// The HTTP gateway: routes OpenAI- and TGI-compatible HTTP requests to the Blossom gRPC API.
#ifndef BLOSSOM_CLIENTS_GATEWAY_GATEWAY_H_
#define BLOSSOM_CLIENTS_GATEWAY_GATEWAY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/metrics.h"
#include "clients/gateway/openai_api.h"
#include "grpcpp/grpcpp.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "clients/gateway/chat_template.h"
#include "clients/gateway/health_watch.h"
#include "server/auth/api_keys.h"
#include "server/http/http_server.h"

namespace blossom::gateway {

// Longest client Authorization value forwarded to the backend (a 9,000-byte one overflowed
// gRPC's metadata and came back as a misleading 429).
inline constexpr size_t kMaxForwardedAuthorizationBytes = 1024;

// Longest client X-Request-Id taken as a request's id: blossom-server logs a client's id of at
// most 128 bytes (RequestIdFor in server/blossom_service.cc) and drops a longer one, and a
// choice's id has "-<k>" appended (up to "-127": n and best_of go up to 128).
inline constexpr size_t kMaxClientRequestIdBytes = 124;

// Whether a client's X-Request-Id is taken as its request's id: 1 to kMaxClientRequestIdBytes
// bytes, each an ASCII letter or digit or one of - _ . : / + = @ (UUIDs, ULIDs, base64 and
// "service/host:n" ids fit). The id reaches blossom-server's log lines (request_id=...) and a
// response header, so spaces, quotes, control characters (CR/LF: forged log lines or headers)
// and non-ASCII bytes are refused; a refused id is replaced, never answered with a 400.
bool IsAcceptableRequestId(absl::string_view id);

struct GatewayOptions {
  // When set, the only model name accepted in requests (others get 404) and the name reported
  // by /v1/models and /info; requests then reach the backend with an empty model. When empty,
  // the client's model name is passed through and the backend's model_id is reported.
  std::string served_model_name;
  absl::Duration request_timeout = absl::Seconds(600);  // gRPC deadline per generation
  absl::Duration health_timeout = absl::Seconds(5);     // /health, /info, /v1/models, /tokenize
  // Sent to the backend as "authorization: Bearer <key>". When empty, the client's own
  // Authorization header (if any) is forwarded instead.
  std::string backend_api_key;
  auth::ApiKeys api_keys;  // empty: no authentication
  // Keys accepted on GET /metrics only (--metrics-api-keys-file): a Prometheus scrape key that
  // cannot run generations. The api_keys are accepted there too. When set, /metrics needs a key
  // even if api_keys is empty.
  auth::ApiKeys metrics_api_keys;
  // How /v1/chat/completions renders messages into a prompt (--chat-template).
  ChatTemplate chat_template;
};

// Routes (with API keys, every route but /live and /health needs one; /metrics also takes a
// metrics key):
//   GET  /live                    liveness, never authenticated
//   GET  /health                  never authenticated (probes send no key; a caller without a
//                                 valid key gets no backend error text in a 503);
//                                 readiness: 200 if the backend's grpc.health.v1 status for
//                                 blossom.v1.Blossom is SERVING, else 503 (so it is 503 while
//                                 the server loads or drains). The status comes from one Watch
//                                 stream the gateway keeps open (HealthWatch), so it follows the
//                                 server as soon as it changes; while that stream is not
//                                 established (backend down or restarting) a probe asks Check
//                                 once (backend without the health service: GetModelInfo)
//   GET  /metrics                 the gateway's Prometheus metrics
//   GET  /openapi.json            the OpenAPI 3.0 description of these routes (openapi.cc)
//   GET  /v1/models               POST /v1/completions   POST /v1/chat/completions
//   POST /generate                POST /generate_stream  POST /tokenize   GET /info
//   POST /                        TGI's compatibility route ("stream": true -> /generate_stream,
//                                 else /generate answered as a list of one), which the
//                                 text-generation Python client uses
// Request ids (the generation routes: completions, chat, generate, generate_stream, "/"): the
// client's X-Request-Id when IsAcceptableRequestId, else a fresh one, is the id sent to the
// server (GenerateRequest.request_id, with "-<k>" per choice when there are several), the
// OpenAI "id" ("cmpl-<id>", "chatcmpl-<id>"), and the X-Request-Id header of every answer of
// that request (refusals and streams included; the HTTP server's own 413/431/400 come before
// any route and carry none). Two requests may share an id: the server makes its own unique
// request key (req-<n>/<id>) and cancels by call, not by id, and the gateway keys nothing by it.
// Order of refusals: an unknown path 404; a keyed route without a valid key 401 (before 405, so
// that no one without a key learns which paths and methods exist); 405; 503 while draining; a
// POST whose Content-Type is present and not JSON 415 (content_type.h: no cross-site form posts).
// Every gRPC call is asynchronous (callback API): no thread waits per request. A client that
// disconnects cancels its gRPC call (ClientContext::TryCancel from ResponseWriter::OnClose).
//
// Thread-safe: Handle() runs on the HTTP server's handler threads; completions run on gRPC's
// callback threads. The destructor waits for outstanding gRPC calls, so stop the HTTP server
// (which cancels in-flight requests) before destroying the gateway.
class Gateway {
 public:
  Gateway(std::shared_ptr<grpc::ChannelInterface> channel, GatewayOptions options);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // The http::Handler.
  void Handle(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);

  const GatewayMetrics& metrics() const { return metrics_; }

  struct RouteSpec {
    std::string path, name, method;  // name: the fixed label used in metrics
  };
  // Every route Handle() serves: what /openapi.json documents (openapi_test compares them).
  static std::vector<RouteSpec> Routes();

  // Drain (SIGTERM): /health turns 503 so load balancers stop sending, every new request but
  // /live and /metrics gets 503 (with Retry-After), and requests in flight run on. Irreversible.
  // (The HTTP server's EndKeepAlive() goes with it: gateway_main.cc.)
  void StartDraining() { draining_.store(true); }
  // The end of a drain whose requests did not all finish (its timeout, or a second signal):
  // cancels every backend call in flight, and each request is answered as its call ends: a
  // stream that started gets an error event in its API's shape (503, kShutDownMessage; OpenAI
  // then `data: [DONE]`), the same path as a backend failure mid-stream, counted in
  // blossom_gateway_stream_errors_total{reason="shutdown"}; a request whose response has not
  // started gets a 503 with Retry-After. Calls that start later are cancelled at once. The
  // answers are queued by the time pending_calls() is 0; the HTTP server's Drain() then writes
  // them out. Irreversible.
  void AbortInFlight();
  // gRPC calls started and not finished (generations, streams, probes).
  int pending_calls() const;

  // What AbortInFlight's answers say.
  static constexpr char kShutDownMessage[] = "the gateway shut down before the request finished";

  // For http::ServerOptions::error_response: the HTTP server's own errors (413, 431, 400, 408,
  // ...) in the OpenAI shape on /v1/ targets and TGI's elsewhere, counted in
  // blossom_gateway_requests_total under the target's route like the answers the gateway gives
  // itself once a request line was read (a refused connection is not a request). Thread-safe
  // (runs on the I/O thread).
  http::Response ProtocolErrorResponse(int status, const std::string& message,
                                       const std::string& target);

 private:
  struct Route;
  static const std::map<std::string, Route>& RouteTable();
  static const Route* FindRoute(absl::string_view path);  // null: no route
  static std::string RouteName(absl::string_view path);    // its metrics label; "other": none
  // Whether the request's Authorization opens `route` (always true for /live and /health).
  bool Authorized(const Route& route, const http::Request& request) const;
  // Whether a /health 503 may carry the backend's error text: for a caller with a valid key, or
  // when there are no keys. /health is open to anyone, and gRPC's messages name addresses,
  // certificates and the server's own refusals.
  bool ShowsBackendErrors(const http::Request& request) const;
  // The 503 of a /health whose backend call failed with `status` ("backend not ready", and the
  // status's message when `detail`).
  static http::Response BackendNotReady(bool detail, const grpc::Status& status);
  static ApiFlavor FlavorOf(absl::string_view path);
  template <typename Req, typename Resp>
  struct UnaryCall;

  // `request_id`: RequestIdFor's, already in the writer's X-Request-Id header.
  void HandleCompletions(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                         bool chat, const std::string& request_id);
  // One unary Generate of `grpc_request`: a client that goes away cancels it; `respond` makes
  // the HTTP response from the answer (a failure: an error in `flavor`'s shape). Ends the HTTP
  // request's in-flight accounting (AddInFlight(-1), CallFinished) when it is answered.
  // `refine_error` (optional) rewrites a refusal before it is answered (the client's field names).
  void UnaryGenerate(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                     ApiFlavor flavor, const blossom::v1::GenerateRequest& grpc_request,
                     std::function<http::Response(const blossom::v1::GenerateResponse&)> respond,
                     std::function<absl::Status(absl::Status)> refine_error = nullptr);
  // Starts one unary call of the server: context, request, response, and what to run when done.
  template <typename Req, typename Resp>
  using UnaryInvoke = std::function<void(grpc::ClientContext*, const Req*, Resp*,
                                         std::function<void(grpc::Status)>)>;
  // Unary calls all in flight together; `respond` makes the response from their answers (in
  // order) when the last answers. The first failure cancels the others and is the answer
  // (after `refine_error`, optional); a client that goes away cancels them all. Ends the HTTP
  // request's in-flight accounting.
  template <typename Req, typename Resp>
  void UnaryBatch(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                  ApiFlavor flavor, const std::vector<Req>& requests,
                  UnaryInvoke<Req, Resp> invoke,
                  std::function<http::Response(std::vector<Resp>&)> respond,
                  std::function<absl::Status(absl::Status)> refine_error);
  // Several choices (prompts x n): one Generate each (UnaryBatch); the response has the
  // choices in order, usage summed.
  void HandleCompletionBatch(const http::Request& request,
                             std::shared_ptr<http::ResponseWriter> writer,
                             std::shared_ptr<openai::CompletionRequest> req, std::string id,
                             int64_t created, ApiFlavor flavor);
  // use_beam_search: one BeamSearch per prompt (UnaryBatch), each prompt's beams its n choices.
  void HandleBeamSearchChoices(const http::Request& request,
                               std::shared_ptr<http::ResponseWriter> writer,
                               std::shared_ptr<openai::CompletionRequest> req, std::string id,
                               int64_t created, ApiFlavor flavor);
  // as_list: TGI's compatibility route "/" answers a non-streaming request with a list of one.
  // Runs one GenerateStream call per request (one per choice) and relays them as server-sent
  // events, interleaved as they come. `preamble` is written right after the headers; `encode`
  // turns each message of choice k into SSE bytes; `encode_error` frames an error body (ErrorJson's,
  // with the unary answer's param and code) that happens after the headers went out (before that, a plain error response in `flavor`'s
  // shape is sent; either way the other calls are cancelled). The encoders are called under
  // one lock, in each call's message order. The response ends after every call's final
  // message.
  struct SseEncoder {
    std::function<std::string()> preamble;
    std::function<std::string(int choice, const blossom::v1::GenerateStreamResponse&)> encode;
    std::function<std::string(absl::string_view error_json)> encode_error;
    // Optional: rewrites a refusal before it is answered (the client's field names).
    std::function<absl::Status(absl::Status)> refine_error;
  };
  void StreamAsSse(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                   ApiFlavor flavor, std::vector<blossom::v1::GenerateRequest> grpc_requests,
                   SseEncoder encoder);
  // Each request's prompt tokens before truncation, as the server counts them: a token-id
  // prompt's length, a text's tokens from the server's Tokenize (one call per run of equal
  // texts: a prompt's n choices share one). `then` runs with them once all are known, on a gRPC
  // callback thread (at once when no text needs a call); `request` need not outlive this call.
  // A failed call is the request's answer instead (an error in `flavor`'s shape), which ends
  // its in-flight accounting. A client that goes away meanwhile does not cancel the calls
  // (short ones): `then`'s stream sees it as it starts.
  void CountPromptTokens(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                         ApiFlavor flavor,
                         const std::vector<blossom::v1::GenerateRequest>& grpc_requests,
                         std::function<void(std::vector<int32_t>)> then);
  void HandleTgiGenerate(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                         bool stream, bool as_list, bool compat, const std::string& request_id);
  // /tokenize (TGI's or vLLM's, by the body) and vLLM's /detokenize: gateway_tokenize.cc.
  void HandleTokenize(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleDetokenize(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  // GET routes answered from GetModelInfo: /health, /v1/models, /v1/models/{model}, /info.
  void HandleModelInfo(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                       const std::string& route);
  // /health: the watched health status; else one Check, then HandleModelInfo.
  void HandleHealth(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);

  // The authorization metadata for the backend: "Bearer <backend_api_key>", else the client's
  // Authorization (a Bearer credential in canonical form), else "". The client's value must
  // fit in metadata: OutOfRange over kMaxForwardedAuthorizationBytes (-> 431), InvalidArgument
  // for bytes gRPC cannot carry (-> 400).
  absl::StatusOr<std::string> ForwardedAuthorization(const http::Request& request) const;
  void SetupContext(const http::Request& request, absl::Duration timeout,
                    grpc::ClientContext* context) const;
  std::string NextRequestId();
  // The client's X-Request-Id when IsAcceptableRequestId, else NextRequestId().
  std::string RequestIdFor(const http::Request& request);
  std::string ModelName(const std::string& requested) const;
  // With --served-model-name: a request's `model` other than that name is NOT_FOUND
  // (UNKNOWN_MODEL), and the name (the gateway's, not the server's) is cleared before the call.
  // Without it the name goes on to the server, which checks it against its own.
  absl::Status TakeServedModel(std::string* model) const;
  void RememberModelId(const std::string& model_id);
  // Without --served_model_name, asks the backend for its model id (GetModelInfo, `request`'s
  // authorization) when none is known yet, so that responses name the model without waiting for
  // a client to call /v1/models. One fetch at a time, outside pending_calls_ (not a client's
  // call); a failed one is retried by the next request; the destructor waits for it.
  void LearnModelId(const http::Request& request);
  void CallStarted();
  void CallFinished();
  // Registers how to cancel a request's backend calls for AbortInFlight (which runs `cancel` at
  // once if it already ran); the id unregisters it when the request is answered. `cancel` may
  // run after the calls ended (so it holds them weakly) and must not block.
  uint64_t TrackCancel(std::function<void()> cancel);
  void UntrackCancel(uint64_t id);
  // TrackCancel for one UnaryCall.
  template <typename Call>
  uint64_t TrackCall(const std::shared_ptr<Call>& call) {
    return TrackCancel([weak = std::weak_ptr<Call>(call)] {
      if (auto c = weak.lock()) c->context.TryCancel();
    });
  }
  // A backend call's status as its client sees it: CANCELLED after AbortInFlight is the
  // shutdown (kShutDownMessage); a transport failure's text (addresses, ports) is logged here
  // and replaced (api_errors.h ForClient); the rest as FromGrpcStatus gives it.
  absl::Status BackendStatus(const grpc::Status& status) const;
  // Whether a failed call's status is the one AbortInFlight caused.
  bool ShutDownStatus(const grpc::Status& status) const {
    return aborted_.load() && status.error_code() == grpc::StatusCode::CANCELLED;
  }

  const GatewayOptions options_;
  const std::shared_ptr<grpc::ChannelInterface> channel_;
  const std::unique_ptr<blossom::v1::Blossom::Stub> stub_;
  const std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  GatewayMetrics metrics_;
  HealthWatch health_watch_;

  std::atomic<bool> draining_{false};
  std::atomic<bool> aborted_{false};  // AbortInFlight ran (set under mu_)
  mutable std::atomic<int64_t> last_transport_log_ms_{0};  // BackendStatus logs 1/s at most
  mutable std::mutex mu_;
  std::condition_variable calls_done_;
  int pending_calls_ = 0;      // guarded by mu_
  bool model_fetch_running_ = false;  // guarded by mu_: LearnModelId's call is in flight
  uint64_t next_request_ = 0;  // guarded by mu_
  std::string model_id_;       // guarded by mu_: last model_id reported by the backend
  // guarded by mu_: AbortInFlight's cancels, by TrackCancel id.
  std::map<uint64_t, std::function<void()>> cancels_;
  uint64_t next_cancel_ = 0;  // guarded by mu_
};

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_GATEWAY_H_
