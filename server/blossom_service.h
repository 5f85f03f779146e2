// The blossom.v1.Blossom gRPC service (callback API: no thread per call or per stream).
//
// Lifecycle: the service is registered before the model loads, so health can say NOT_SERVING
// and calls get UNAVAILABLE ("the model is loading") until SetEngine. StartDraining (SIGTERM)
// makes new calls fail with UNAVAILABLE while calls in flight run to completion; those the
// engine's shutdown then cuts (the drain timeout) end with UNAVAILABLE too, with SHUTTING_DOWN
// and a retry delay (DescribeEngineEnd), and count as outcome "aborted", not "error".
//
// BeamSearch calls run one engine beam search each (server/beam_search_call.cc): its rounds are
// engine requests like any other, and cancelling the call cancels the round in flight.
//
// Each Generate/GenerateStream call submits one engine request whose events arrive on the
// engine's delivery thread through a sink; the sink converts them and hands them to the call's
// reactor, which keeps at most one write in flight (gRPC's rule) and queues the rest. A client that
// cancels, disconnects or passes its deadline triggers OnCancel, which cancels the engine
// request so its KV blocks are freed at once.
//
// Authentication: when API keys are configured, every call must carry the metadata
// `authorization: Bearer <key>` (checked by //server/auth:api_keys, as in the gateway).
//
// Thread-safety: all public methods may be called from any thread. SetEngine happens once,
// before any call is admitted (release/acquire on state_).
#ifndef BLOSSOM_SERVER_BLOSSOM_SERVICE_H_
#define BLOSSOM_SERVER_BLOSSOM_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/guided/constraint_cache.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/grpcpp.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "server/auth/api_keys.h"
#include "server/grpc_status.h"
#include "server/request_convert.h"
#include "server/server_metrics.h"
#include "server/undecodable_request.h"
#include "server/worker_pool.h"

namespace blossom {

struct ServiceOptions {
  RequestLimits limits;
  auth::ApiKeys api_keys;  // empty: no authentication
};

// GenerateStream is a raw method (it parses its own request bytes): see
// //server:undecodable_request for why.
class BlossomService final
    : public v1::Blossom::WithRawCallbackMethod_GenerateStream<v1::Blossom::CallbackService> {
 public:
  // kFailed: the engine failed for good (EngineObserver::OnEngineFailed); generations are
  // refused with UNAVAILABLE (MODEL_FAILED) until the process is restarted.
  enum class State : int { kLoading = 0, kServing = 1, kDraining = 2, kFailed = 3 };

  // `metrics` may be null; it must outlive the service.
  BlossomService(ServiceOptions options, ServerMetrics* metrics);

  // Starts serving. `engine` and `tokenizer` must outlive every call. model_info.vocab_size must
  // be the model's (refusals of out-of-vocabulary ids are attributed with it); its
  // limits.max_total_tokens and limits.max_input_tokens, when set, are the caps requests are
  // checked against from now on (the engine's, which start-up may have lowered to fit the KV
  // cache, and the prompt cap that follows it). Called once, before serving.
  void SetEngine(Engine* engine, const Tokenizer* tokenizer, v1::ModelInfo model_info);
  void StartDraining();
  // The engine can no longer run (Engine::failure says why): refuse generations from now on.
  // Only after SetEngine.
  void MarkFailed();
  State state() const { return static_cast<State>(state_.load(std::memory_order_acquire)); }
  // OK, or the UNAUTHENTICATED refusal a call with this metadata gets when API keys are
  // configured (//server:undecodable_request uses it for calls the service never sees).
  absl::Status Authenticate(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  // Generate / GenerateStream calls admitted and not yet finished.
  int64_t generations_in_flight() const { return in_flight_.load(); }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  // `request`: a serialized v1::GenerateStreamRequest; answers v1::GenerateStreamResponse
  // messages. Bytes that do not decode get UndecodableRequestStatus's INVALID_ARGUMENT.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateStream(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* request) override;
  // One engine beam search (engine/serving/beam_search); cancelled with the call.
  grpc::ServerUnaryReactor* BeamSearch(grpc::CallbackServerContext* context,
                                       const v1::BeamSearchRequest* request,
                                       v1::BeamSearchResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

  // Shared pieces of the call reactors (public for blossom_service.cc's reactor classes).
  struct Admission;
  Engine* engine() const { return engine_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  // Compiled JSON schemas of structured-output requests (thread-safe).
  ConstraintCache* guided_constraints() const { return guided_constraints_.get(); }
  // Where structured-output requests whose constraint is not recent are prepared (compiled),
  // off gRPC's threads: as many threads as the cache's compile slots, 1,024 requests waiting.
  WorkerPool* compile_pool() const { return compile_pool_.get(); }
  ServerMetrics* metrics() const { return metrics_; }
  int32_t vocab_size() const { return model_info_.vocab_size(); }
  // The model's end tokens (Engine::end_token_ids).
  absl::Span<const int32_t> end_token_ids() const { return engine_->end_token_ids(); }
  const std::string& system_fingerprint() const { return system_fingerprint_; }
  void CallFinished(const std::string& outcome);

 private:
  // OK, or the status a call must be refused with (auth, loading, draining).
  absl::Status Admit(grpc::CallbackServerContext* context, bool generation) const;
  // Admit's second half: what the server's state (loading, draining, failed) allows.
  absl::Status AdmitState(bool generation) const;
  std::string RequestIdFor(grpc::CallbackServerContext* context,
                           const v1::GenerateRequest& request);

  // Constant once serving; SetEngine sets limits.max_total_tokens and max_input_tokens before.
  ServiceOptions options_;
  ServerMetrics* const metrics_;
  std::atomic<int> state_{static_cast<int>(State::kLoading)};
  Engine* engine_ = nullptr;                // set once before state_ becomes kServing
  const Tokenizer* tokenizer_ = nullptr;    // idem
  std::unique_ptr<ConstraintCache> guided_constraints_;  // idem
  std::unique_ptr<WorkerPool> compile_pool_;  // idem; destroyed first (its tasks use the cache)
  v1::ModelInfo model_info_;                // idem
  std::string system_fingerprint_;          // idem (from model_info_)
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> next_request_number_{1};
};

// A unary call answered at once with `status` (a refusal before anything started).
grpc::ServerUnaryReactor* RefuseUnary(const grpc::Status& status);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_BLOSSOM_SERVICE_H_
