// BlossomService::BeamSearch: one engine beam search (engine/serving/beam_search) per call.
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/serving/beam_search.h"
#include "engine/text/sanitize.h"
#include "server/beam_search_convert.h"
#include "server/blossom_service.h"
#include "server/status_details.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

constexpr size_t kMaxLoggedMessageBytes = 300;

// Invariants (under mutex_): Finish is called once, never before the constructor is done with
// the search (started_), and only after the search's outcome came or when nothing was started;
// the search calls its `done` once, so the raw `this` it holds stays valid until then.
class BeamSearchReactor final : public grpc::ServerUnaryReactor {
 public:
  BeamSearchReactor(BlossomService* service, const v1::BeamSearchRequest* request,
                    v1::BeamSearchResponse* response, std::string request_id,
                    const RequestLimits& limits)
      : service_(service), request_(*request), response_(response),
        request_id_(std::move(request_id)) {
    absl::Status status = StartSearch(limits);
    if (!status.ok()) {
      spdlog::info("request_id={} refused: {} {}", request_id_, StatusCodeLabel(status.code()),
                   SanitizeForMessage(status.message(), kMaxLoggedMessageBytes));
      outcome_ = StatusCodeLabel(status.code());
      std::lock_guard<std::mutex> lock(mutex_);
      final_status_ = ToGrpcStatus(status);
      outcome_received_ = true;
    }
    grpc::Status finish_with;
    bool finish_now = false;
    std::shared_ptr<BeamSearch> cancel;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      started_ = true;
      if (outcome_received_) {
        finish_now = true;
        finish_with = final_status_;
      } else if (cancelled_) {
        cancel = search_;
      }
    }
    if (cancel) cancel->Cancel();  // may finish the call: nothing of `this` is used after it
    if (finish_now) Finish(finish_with);
  }

  void OnCancel() override {
    std::shared_ptr<BeamSearch> search;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
      search = search_;
    }
    if (search) search->Cancel();  // its outcome finishes the call
  }

  void OnDone() override {
    service_->CallFinished(outcome_);
    delete this;
  }

 private:
  absl::Status StartSearch(const RequestLimits& limits) {
    auto converted = ToBeamSearch(request_, *service_->tokenizer(), limits,
                                  service_->end_token_ids(), service_->vocab_size());
    if (!converted.ok()) return converted.status();
    converted_ = std::move(*converted);
    // The context first, as BeamSearch::Start checks it: a search past it is refused naming
    // max_new_tokens, which a narrower search would not mend.
    const absl::Status fits =
        service_->engine()->CheckFits(static_cast<int64_t>(converted_.search.prompt_tokens.size()),
                                      converted_.search.params.max_new_tokens);
    if (!fits.ok()) return DescribeRefusal(fits);
    // A search is admitted with room for its widest round in the waiting queue: beam_width
    // requests of up to the whole length. One that could never have it is refused for good,
    // naming beam_width (BeamSearch::Start refuses it too, without a field).
    absl::Status can_hold = BeamSearch::CheckQueueCanHold(
        service_->engine()->scheduler_config(), converted_.search.params.beam_width,
        static_cast<int64_t>(converted_.search.prompt_tokens.size()),
        converted_.search.params.max_new_tokens);
    if (!can_hold.ok()) {
      const std::string message(can_hold.message());
      return WithReason(WithFieldViolation(std::move(can_hold), "beam_width", message),
                        error_reason::kInvalidBeamSearchParams);
    }
    auto search = BeamSearch::Start(service_->engine(), converted_.search,
                                    [this](BeamSearchOutcome outcome) { OnOutcome(outcome); });
    if (search.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      search_ = std::move(*search);
      return absl::OkStatus();
    }
    const absl::Status& refused = search.status();
    if (refused.code() == absl::StatusCode::kUnavailable &&
        !service_->engine()->failure().ok()) {
      return WithReason(refused, error_reason::kModelFailed);
    }
    return DescribeRefusal(refused);
  }

  absl::Status DescribeRefusal(const absl::Status& refused) const {
    return DescribeEngineRefusal(refused, converted_.as_generation, service_->vocab_size(),
                                 request_.has_token_ids() ? "token_ids" : "text");
  }

  // The search's `done`: on the engine's delivery thread, or on the canceller's.
  void OnOutcome(const BeamSearchOutcome& outcome) {
    grpc::Status status = grpc::Status::OK;
    if (outcome.status.ok()) {
      FillBeamSearchResponse(outcome, request_, converted_, service_->end_token_ids(),
                             *service_->tokenizer(), response_);
      response_->set_request_id(request_id_);
      response_->set_system_fingerprint(service_->system_fingerprint());
      outcome_ = "finished";
    } else if (outcome.status.code() == absl::StatusCode::kCancelled) {
      status = grpc::Status(grpc::StatusCode::CANCELLED, "the request was cancelled");
      outcome_ = "cancelled";
    } else {
      // A round the engine's shutdown cut (or refused) aborts the search: retryable, no failure.
      status = ToGrpcStatus(DescribeEngineEnd(outcome.status));
      outcome_ = IsEngineShutdown(outcome.status) ? "aborted" : "error";
    }
    const double seconds = std::chrono::duration<double>(outcome.finished - outcome.arrival).count();
    if (service_->metrics()) {
      service_->metrics()->ObserveBeamSearch(seconds, outcome.prompt_tokens,
                                             response_->usage().generated_tokens(),
                                             converted_.search.params.max_new_tokens, outcome_);
    }
    spdlog::info(
        "request_id={} kind=beam_search outcome={} beam_width={} prompt_tokens={} steps={} "
        "computed_tokens={} cached_tokens={} total_s={:.4f}{}{}",
        request_id_, outcome_, converted_.search.params.beam_width, outcome.prompt_tokens,
        outcome.rounds, outcome.computed_tokens, outcome.cached_tokens, seconds,
        outcome.status.ok() ? "" : " error=",
        outcome.status.ok() ? "" : SanitizeForMessage(outcome.status.message(),
                                                      kMaxLoggedMessageBytes));
    bool finish_now = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      outcome_received_ = true;
      final_status_ = status;
      finish_now = started_;
    }
    if (finish_now) Finish(status);
  }

  BlossomService* const service_;
  const v1::BeamSearchRequest request_;
  v1::BeamSearchResponse* const response_;
  const std::string request_id_;
  ConvertedBeamSearch converted_;  // set before the search starts, then read only
  std::string outcome_ = "finished";

  std::mutex mutex_;
  std::shared_ptr<BeamSearch> search_;  // guarded by mutex_
  bool started_ = false;                // guarded by mutex_
  bool cancelled_ = false;              // guarded by mutex_
  bool outcome_received_ = false;       // guarded by mutex_
  grpc::Status final_status_;           // guarded by mutex_
};

}  // namespace

grpc::ServerUnaryReactor* BlossomService::BeamSearch(grpc::CallbackServerContext* context,
                                                     const v1::BeamSearchRequest* request,
                                                     v1::BeamSearchResponse* response) {
  absl::Status admitted = Admit(context, /*generation=*/true);
  if (!admitted.ok()) {
    if (metrics_) metrics_->CountRequest(StatusCodeLabel(admitted.code()));
    return RefuseUnary(ToGrpcStatus(admitted));
  }
  in_flight_.fetch_add(1);
  return new BeamSearchReactor(this, request, response,
                               RequestIdFor(context, AsGenerateRequest(*request)),
                               options_.limits);
}

}  // namespace blossom
