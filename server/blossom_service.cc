#include "server/blossom_service.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/guided/token_vocabulary.h"
#include "server/status_details.h"
#include "server/tokenize_rpc.h"

namespace blossom {

namespace {

// Finishes a unary call at once with `status`.
class ImmediateReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit ImmediateReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* RefuseUnary(const grpc::Status& status) {
  return new ImmediateReactor(status);
}

BlossomService::BlossomService(ServiceOptions options, ServerMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {}

void BlossomService::SetEngine(Engine* engine, const Tokenizer* tokenizer,
                               v1::ModelInfo model_info) {
  engine_ = engine;
  tokenizer_ = tokenizer;
  // The vocabulary trie is built on the first structured-output request, not at start-up.
  guided_constraints_ = std::make_unique<ConstraintCache>(
      [tokenizer] { return TokenVocabulary::FromTokenizer(*tokenizer); });
  const int compile_threads = guided_constraints_->max_concurrent_compiles();
  // Queued requests hold no thread, so the queue is long; the wait in it is what is bounded
  // (GenerationCall: 10 s), as is the CPU (compile_threads).
  std::function<void(int)> report;
  if (metrics_ != nullptr) report = [m = metrics_](int delta) { m->AddGuidedPreparing(delta); };
  compile_pool_ =
      std::make_unique<WorkerPool>(compile_threads, compile_threads + 1024, std::move(report));
  // The engine's cap, which start-up may have lowered to what the KV cache holds (kv_fit.h).
  // Written before the state turns serving: calls read the limits only once admitted.
  if (model_info.limits().max_total_tokens() > 0) {
    options_.limits.max_total_tokens = model_info.limits().max_total_tokens();
  }
  // Lowered with it when --max_input_tokens is the default (max_total_tokens - 1).
  if (model_info.limits().max_input_tokens() > 0) {
    options_.limits.max_input_tokens = model_info.limits().max_input_tokens();
  }
  options_.limits.max_waiting_requests = engine->scheduler_config().max_waiting_requests;
  model_info_ = std::move(model_info);
  system_fingerprint_ = SystemFingerprint(model_info_);
  state_.store(static_cast<int>(State::kServing), std::memory_order_release);
}

void BlossomService::StartDraining() {
  // A failed service stays failed (its /live must keep asking for the restart).
  int state = state_.load(std::memory_order_acquire);
  while (state != static_cast<int>(State::kFailed) &&
         !state_.compare_exchange_weak(state, static_cast<int>(State::kDraining),
                                       std::memory_order_acq_rel)) {
  }
}

void BlossomService::MarkFailed() {
  state_.store(static_cast<int>(State::kFailed), std::memory_order_release);
}

absl::Status BlossomService::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  if (!options_.api_keys.enabled()) return absl::OkStatus();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return WithReason(
        absl::UnauthenticatedError("missing 'authorization: Bearer <api key>' metadata"),
        error_reason::kMissingApiKey);
  }
  if (!options_.api_keys.Allows(absl::string_view(it->second.data(), it->second.size()))) {
    return WithReason(absl::UnauthenticatedError("invalid API key"), error_reason::kInvalidApiKey);
  }
  return absl::OkStatus();
}

absl::Status BlossomService::Admit(grpc::CallbackServerContext* context, bool generation) const {
  absl::Status authenticated = Authenticate(context->client_metadata());
  return authenticated.ok() ? AdmitState(generation) : authenticated;
}

absl::Status BlossomService::AdmitState(bool generation) const {
  switch (state()) {
    case State::kLoading:
      return WithRetryDelay(WithReason(absl::UnavailableError("the model is loading; retry later"),
                                       error_reason::kModelLoading),
                            kLoadingRetryDelay);
    case State::kDraining:
      if (generation) {
        return WithRetryDelay(WithReason(absl::UnavailableError("the server is shutting down"),
                                         error_reason::kShuttingDown),
                              kUnavailableRetryDelay);
      }
      break;
    case State::kFailed:
      if (generation) {
        // No retry delay: this server will not recover; another replica (or a restart) will.
        return WithReason(absl::UnavailableError(absl::StrCat(
                              "the model can no longer run (", engine_->failure().message(),
                              "); this server must be restarted")),
                          error_reason::kModelFailed);
      }
      break;
    case State::kServing: break;
  }
  return absl::OkStatus();
}

std::string BlossomService::RequestIdFor(grpc::CallbackServerContext* context,
                                         const v1::GenerateRequest& request) {
  std::string id = absl::StrCat("req-", next_request_number_.fetch_add(1));
  std::string client_id = request.request_id();
  if (client_id.empty()) {
    auto it = context->client_metadata().find("x-request-id");
    if (it != context->client_metadata().end()) client_id.assign(it->second.data(), it->second.size());
  }
  // Client ids are echoed into logs: keep them short and printable.
  if (!client_id.empty() && client_id.size() <= 128) {
    bool printable = true;
    for (char c : client_id) printable &= (c > 0x20 && c < 0x7f);
    if (printable) absl::StrAppend(&id, "/", client_id);
  }
  return id;
}

void BlossomService::CallFinished(const std::string& outcome) {
  in_flight_.fetch_sub(1);
  // Engine-side outcomes are counted by ServerMetrics::OnRequestFinished; here only refusals.
  if (metrics_ && !IsEngineOutcome(outcome)) metrics_->CountRequest(outcome);
}

grpc::ServerUnaryReactor* BlossomService::Tokenize(grpc::CallbackServerContext* context,
                                                   const v1::TokenizeRequest* request,
                                                   v1::TokenizeResponse* response) {
  absl::Status status = Admit(context, /*generation=*/false);
  if (status.ok()) status = CheckModelName(request->model(), options_.limits);
  if (status.ok()) {
    status = TokenizeText(*tokenizer_, *request, kMaxTokenizeTokens,
                          model_info_.limits().max_total_tokens(), response);
  }
  return new ImmediateReactor(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* BlossomService::Detokenize(grpc::CallbackServerContext* context,
                                                     const v1::DetokenizeRequest* request,
                                                     v1::DetokenizeResponse* response) {
  absl::Status status = Admit(context, /*generation=*/false);
  if (status.ok()) status = CheckModelName(request->model(), options_.limits);
  if (status.ok()) {
    status = DetokenizeIds(*tokenizer_, *request, model_info_.vocab_size(), kMaxTokenizeTokens,
                           response);
  }
  return new ImmediateReactor(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* BlossomService::GetModelInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetModelInfoRequest*,
                                                       v1::ModelInfo* response) {
  absl::Status admitted = Admit(context, /*generation=*/false);
  if (!admitted.ok()) return new ImmediateReactor(ToGrpcStatus(admitted));
  *response = model_info_;
  response->set_kv_blocks_total(engine_->scheduler_stats().blocks_total);
  return new ImmediateReactor(grpc::Status::OK);
}

}  // namespace blossom
