// BlossomService::Generate and GenerateStream: one GenerationCall per call (admission,
// submission, cancellation and the hand-off from the engine's delivery thread), as a unary or a
// server-streaming reactor.
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/guided/constraint_cache.h"
#include "engine/guided/json_grammar.h"
#include "engine/text/sanitize.h"
#include "proto/blossom/v1/stream_request.h"
#include "server/blossom_service.h"
#include "server/status_details.h"
#include "server/worker_pool.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

// Longest client-influenced text in one log line.
constexpr size_t kMaxLoggedMessageBytes = 300;

// The longest a structured-output request waits in the compile pool's queue (as long as
// ConstraintCache lets a compile wait for a slot).
constexpr auto kMaxCompileQueueWait = std::chrono::seconds(10);

double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The outcome label of a refused call in blossom_requests_total.
std::string RefusalLabel(const absl::Status& status) {
  std::string label = StatusCodeLabel(status.code());
  return label;
}

void LogFinished(const std::string& request_id, const char* kind, const EngineEvent& event) {
  const RequestTimings& t = event.timings;
  spdlog::info(
      "request_id={} kind={} finish_reason={} prompt_tokens={} generated_tokens={} "
      "queue_s={:.4f} ttft_s={:.4f} total_s={:.4f} preemptions={}{}{}",
      request_id, kind, FinishReasonName(event.finish_reason), event.usage.prompt_tokens,
      event.usage.generated_tokens,
      t.first_scheduled == Clock::time_point{} ? 0.0 : SecondsBetween(t.arrival, t.first_scheduled),
      t.first_token == Clock::time_point{} ? 0.0 : SecondsBetween(t.arrival, t.first_token),
      SecondsBetween(t.arrival, t.finished), t.num_preemptions, event.status.ok() ? "" : " error=",
      event.status.ok() ? "" : SanitizeForMessage(event.status.message(), kMaxLoggedMessageBytes));
}

// The status a call ends with, given its final engine event.
grpc::Status FinalStatus(const EngineEvent& event) {
  if (!event.status.ok()) return ToGrpcStatus(DescribeEngineEnd(event.status));
  if (event.finish_reason == FinishReason::kCancelled) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the request was cancelled");
  }
  return grpc::Status::OK;
}

// Common part of Generate and GenerateStream: admission, submission, cancellation and the
// hand-off from the engine's delivery thread. The submission (SubmitConverted or Refuse, which
// end with Started()) runs in the reactor's constructor, or for a structured-output request on the
// service's compile pool after the constructor returned. Invariants (under mutex_): Finish is
// called at most once, never before Started() (so `this` outlives the submission), and only after the
// engine's final event was recorded or when nothing was submitted; the engine never calls the
// sink after its final event, so the sink's raw `this` stays valid. A reaction that records the
// final event decides what follows in the same critical section and touches nothing after it
// (another thread may finish the call, and OnDone delete it, as soon as mutex_ is released).
class GenerationCall {
 public:
  GenerationCall(BlossomService* service, grpc::CallbackServerContext* context,
                 std::string request_id, RequestLimits limits)
      : service_(service),
        context_(context),
        request_id_(std::move(request_id)),
        limits_(std::move(limits)) {}
  virtual ~GenerationCall() = default;

 protected:
  // Submits `request`, or refuses it (finishing the call). A request whose structured-output
  // constraint must be compiled is prepared on the service's compile pool instead of here, on a
  // gRPC thread: a compile can take a second of CPU, or wait for a compile slot, and gRPC's
  // callback threads are few and serve every call (Tokenize and health checks too). The pool's
  // queue is bounded: past it, and past kMaxCompileQueueWait in it, the request is refused as
  // overload (GUIDED_COMPILE_BUSY, retryable).
  void Submit(const v1::GenerateRequest& request) {
    WorkerPool* pool = service_->compile_pool();
    // Here only what needs no compile: a constraint compiled (or refused) recently.
    absl::StatusOr<EngineRequest> converted =
        Convert(request, pool != nullptr ? ConstraintCache::Mode::kRecentOnly
                                         : ConstraintCache::Mode::kCompile);
    if (!GuidedConstraintNotCompiled(converted.status())) {
      SubmitConverted(request, std::move(converted));
      return;
    }
    const Clock::time_point queued = Clock::now();
    // A copy: a stream's request is its handler's local. `this` stays valid: nothing finishes
    // the call before the task has submitted or refused it.
    if (pool->TryPost([this, request, queued] { SubmitQueued(request, queued); })) return;
    Refuse(GuidedCompileBusyError(
        absl::StrCat("structured output: ", pool->pending(),
                     " structured-output requests are being prepared already; retry shortly")));
  }

 private:
  absl::StatusOr<EngineRequest> Convert(const v1::GenerateRequest& request,
                                        ConstraintCache::Mode mode) {
    return ToEngineRequest(request, *service_->tokenizer(), limits_,
                           service_->guided_constraints(), mode);
  }

  // On the compile pool.
  void SubmitQueued(const v1::GenerateRequest& request, Clock::time_point queued) {
    bool cancelled = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled = cancelled_;
    }
    if (cancelled) {  // the client left while it waited: no compile for nobody
      // Counted here: the engine, which counts cancelled requests, never saw this one.
      if (service_->metrics()) {
        service_->metrics()->CountRequest(OutcomeLabel(FinishReason::kCancelled));
      }
      Refuse(absl::CancelledError("the call was cancelled before its request was prepared"));
      return;
    }
    if (Clock::now() - queued > kMaxCompileQueueWait) {
      Refuse(GuidedCompileBusyError(
          "structured output: the request waited too long for a compile slot; retry shortly"));
      return;
    }
    SubmitConverted(request, Convert(request, ConstraintCache::Mode::kCompile));
  }

  // Submits the engine request converted from `request`, or refuses the call with the
  // conversion's error.
  void SubmitConverted(const v1::GenerateRequest& request,
                       absl::StatusOr<EngineRequest> engine_request) {
    if (engine_request.ok()) {
      // Kept to attribute a refusal to its field (the request itself moves into the engine).
      EngineRequest submitted_params;
      submitted_params.sampling = engine_request->sampling;
      submitted_params.stopping = engine_request->stopping;
      with_logprobs_ = engine_request->sampling.logprobs >= 0;
      with_prompt_logprobs_ = engine_request->sampling.prompt_logprobs >= 0;
      if (!engine_request->prompt_tokens.empty()) {
        first_prompt_token_ = engine_request->prompt_tokens.front();
      }
      // The ids as the engine got them (a text prompt tokenized here), for the final message.
      if (request.return_prompt_tokens()) prompt_ids_ = engine_request->prompt_tokens;
      auto stream = service_->engine()->Submit(
          std::move(*engine_request), [this](const EngineEvent& event) { OnEvent(event); });
      if (stream.ok()) {
        bool cancel_now = false;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          engine_id_ = (*stream)->id();
          cancel_now = cancelled_;
        }
        spdlog::debug("request_id={} engine_id={} admitted", request_id_, (*stream)->id());
        if (cancel_now) service_->engine()->Cancel((*stream)->id());
        Started();
        return;
      }
      if (stream.status().code() == absl::StatusCode::kInvalidArgument) {
        // Only then are the prompt's ids needed (out-of-vocabulary ones are a prompt error):
        // those the engine got, after truncate_prompt_tokens kept the last of them.
        const auto& ids = request.token_ids().ids();
        const int keep = request.truncate_prompt_tokens();
        submitted_params.prompt_tokens.assign(
            keep > 0 && ids.size() > keep ? ids.end() - keep : ids.begin(), ids.end());
      }
      if (stream.status().code() == absl::StatusCode::kUnavailable &&
          !service_->engine()->failure().ok()) {
        // Failed for good (MarkFailed may not have run yet): no retry invitation.
        engine_request = WithReason(stream.status(), error_reason::kModelFailed);
      } else {
        engine_request = DescribeEngineRefusal(
            stream.status(), submitted_params, service_->vocab_size(),
            request.prompt_case() == v1::GenerateRequest::kText ? "text" : "token_ids");
      }
    }
    Refuse(engine_request.status());
  }

  // Finishes the call with `status` (nothing was submitted).
  void Refuse(const absl::Status& status) {
    // Messages may quote client input (a model name): escaped and cut, so that a "\n" cannot
    // forge a log line and a huge input cannot make a huge one.
    spdlog::info("request_id={} refused: {} {}", request_id_, StatusCodeLabel(status.code()),
                 SanitizeForMessage(status.message(), kMaxLoggedMessageBytes));
    outcome_ = RefusalLabel(status);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      refused_ = ToGrpcStatus(status);
      final_received_ = true;
    }
    Started();
  }

 protected:
  void Cancel() {
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
      id = engine_id_;
    }
    // Must not touch members afterwards: the final event may finish and delete the call.
    if (id != 0) service_->engine()->Cancel(id);
  }

  // One inter-token latency per step that gave this request tokens: the tokens of one step
  // (accepted speculative drafts) share its time, and counting each would add zeros that pull
  // the distribution below any step's real latency (vLLM observes once per step too).
  void ObserveTokenTime(Clock::time_point time) {
    if (time == last_token_time_) return;
    if (service_->metrics() && last_token_time_ != Clock::time_point{}) {
      service_->metrics()->ObserveInterTokenLatency(SecondsBetween(last_token_time_, time));
    }
    last_token_time_ = time;
  }

  // The token of a token event into the message part `token` returns (called only then) and,
  // with the request's first token, the prompt logprobs into `prompt_logprobs`.
  template <typename TokenSlot>
  void FillTokenAndPromptLogprobs(const EngineEvent& event, TokenSlot token,
                                  google::protobuf::RepeatedPtrField<v1::Token>* prompt_logprobs) {
    if (!event.has_token) return;
    ObserveTokenTime(event.time);
    FillToken(event.token, *service_->tokenizer(), with_logprobs_, token());
    if (with_prompt_logprobs_ && !prompt_logprobs_sent_) {
      prompt_logprobs_sent_ = true;
      FillPromptLogprobs(first_prompt_token_, event.prompt_logprobs, *service_->tokenizer(),
                         prompt_logprobs);
    }
  }

  virtual void OnEvent(const EngineEvent& event) = 0;
  // Called once Start is over; may Finish.
  virtual void Started() = 0;

  BlossomService* const service_;
  grpc::CallbackServerContext* const context_;
  const std::string request_id_;
  const RequestLimits limits_;
  std::mutex mutex_;
  uint64_t engine_id_ = 0;        // guarded by mutex_
  bool cancelled_ = false;        // guarded by mutex_
  bool final_received_ = false;   // guarded by mutex_
  bool finish_called_ = false;    // guarded by mutex_
  bool started_ = false;          // guarded by mutex_
  grpc::Status refused_;          // guarded by mutex_ (set when Submit refused)
  grpc::Status final_status_;     // guarded by mutex_
  std::string outcome_ = "finished";
  bool with_logprobs_ = false;
  // prompt_logprobs: sent once, with the first token; the engine's list starts at prompt token 1.
  bool with_prompt_logprobs_ = false, prompt_logprobs_sent_ = false;
  int32_t first_prompt_token_ = 0;
  std::vector<int32_t> prompt_ids_;  // return_prompt_tokens: set before the engine has the request
  Clock::time_point last_token_time_{};  // delivery thread only (token events)
};


class UnaryGenerateReactor final : public grpc::ServerUnaryReactor, public GenerationCall {
 public:
  UnaryGenerateReactor(BlossomService* service, grpc::CallbackServerContext* context,
                       const v1::GenerateRequest* request, v1::GenerateResponse* response,
                       std::string request_id, RequestLimits limits)
      : GenerationCall(service, context, std::move(request_id), std::move(limits)),
        response_(response) {
    Submit(*request);
  }

  void OnCancel() override { Cancel(); }
  void OnDone() override {
    service_->CallFinished(outcome_);
    delete this;
  }

 private:
  void OnEvent(const EngineEvent& event) override {
    FillTokenAndPromptLogprobs(event, [&] { return response_->add_tokens(); },
                               response_->mutable_prompt_logprobs());
    response_->mutable_text()->append(event.token.text_delta);
    if (!event.finished) return;
    FillFinalInfo(event, request_id_, response_->mutable_final());
    response_->mutable_final()->set_system_fingerprint(service_->system_fingerprint());
    for (int32_t id : prompt_ids_) response_->mutable_final()->add_prompt_token_ids(id);
    LogFinished(request_id_, "unary", event);
    outcome_ = OutcomeLabel(event.finish_reason);
    grpc::Status status = FinalStatus(event);
    bool finish_now = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      final_received_ = true;
      final_status_ = status;
      finish_now = started_ && !finish_called_;
      if (finish_now) finish_called_ = true;
    }
    if (finish_now) Finish(status);
  }

  void Started() override {
    grpc::Status status;
    bool finish_now = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      started_ = true;
      if (final_received_ && !finish_called_) {
        finish_called_ = true;
        finish_now = true;
        status = refused_.ok() ? final_status_ : refused_;
      }
    }
    if (finish_now) Finish(status);
  }

  v1::GenerateResponse* const response_;
};

// Writes serialized v1::GenerateStreamResponse messages (GenerateStream is a raw method).
class StreamGenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                                    public GenerationCall {
 public:
  StreamGenerateReactor(BlossomService* service, grpc::CallbackServerContext* context,
                        const v1::GenerateRequest* request, std::string request_id,
                        RequestLimits limits)
      : GenerationCall(service, context, std::move(request_id), std::move(limits)) {
    Submit(*request);
  }

  void OnCancel() override { Cancel(); }

  void OnWriteDone(bool ok) override {
    uint64_t cancel_id = 0;
    Next next;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      writing_ = false;
      if (!ok && !broken_) {
        // The client is gone: stop generating for it.
        broken_ = true;
        pending_.clear();
        cancel_id = final_received_ ? 0 : engine_id_;
      }
      if (cancel_id == 0) next = NextLocked();
    }
    if (cancel_id != 0) {
      service_->engine()->Cancel(cancel_id);  // delivers the final event, which finishes
      return;
    }
    if (next.action != Next::kNothing) Act(next);  // this may be gone otherwise
  }

  void OnDone() override {
    service_->CallFinished(outcome_);
    delete this;
  }

 private:
  void OnEvent(const EngineEvent& event) override {
    v1::GenerateStreamResponse message;
    FillTokenAndPromptLogprobs(event, [&] { return message.mutable_token(); },
                               message.mutable_prompt_logprobs());
    message.set_text_delta(event.token.text_delta);
    if (event.finished) {
      FillFinalInfo(event, request_id_, message.mutable_final());
      message.mutable_final()->set_system_fingerprint(service_->system_fingerprint());
      for (int32_t id : prompt_ids_) message.mutable_final()->add_prompt_token_ids(id);
      LogFinished(request_id_, "stream", event);
      outcome_ = OutcomeLabel(event.finish_reason);
    }
    Next next;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // A failed request still gets the tokens it produced, then its error status.
      if (!broken_ && (event.has_token || event.finished)) pending_.push_back(std::move(message));
      if (event.finished) {
        final_received_ = true;
        final_status_ = FinalStatus(event);
        // On an error the status is the end: a final message would read as a normal one (the
        // gateway ends the HTTP stream on it, with a finish reason and [DONE], and the error
        // event after it would be lost). So the final message goes, but text it carries (held
        // back at the failure: a partial stop string, an incomplete UTF-8 character) is still
        // delivered, as a plain message before the status.
        if (!final_status_.ok() && !pending_.empty() && pending_.back().has_final()) {
          if (!pending_.back().has_token() && pending_.back().text_delta().empty()) {
            pending_.pop_back();
          } else {
            pending_.back().clear_final();
          }
        }
      }
      // Decided in the same critical section that recorded the event: once the lock is
      // released, a write completing on a gRPC thread may finish the call and delete this.
      next = NextLocked();
    }
    if (next.action != Next::kNothing) Act(next);  // this may be gone otherwise
  }

  void Started() override {
    Next next;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      started_ = true;
      if (!refused_.ok()) final_status_ = refused_;
      next = NextLocked();
    }
    if (next.action != Next::kNothing) Act(next);  // this may be gone otherwise
  }

  // What the call does next: write the next message, or finish once everything was written.
  // Claimed under mutex_ (writing_ or finish_called_ set), so exactly one thread acts on it,
  // outside mutex_ because gRPC may run reactions inline. Acting is the last thing a reaction
  // does: after Finish (or a write whose completion finishes) this may be deleted.
  struct Next {
    enum { kNothing, kWrite, kFinish } action = kNothing;
    grpc::Status status;
  };
  Next NextLocked() {
    Next next;
    if (!started_ || writing_ || finish_called_) return next;
    if (!pending_.empty() && !broken_) {
      current_message_ = std::move(pending_.front());  // serialized in Act, outside mutex_
      pending_.pop_front();
      writing_ = true;
      next.action = Next::kWrite;
    } else if (final_received_) {
      finish_called_ = true;
      next.status = final_status_;
      next.action = Next::kFinish;
    }
    return next;
  }
  void Act(const Next& next) {
    if (next.action == Next::kWrite) {
      // Serialized as gRPC serializes a typed write. writing_ keeps current_message_ and
      // current_ this thread's until OnWriteDone.
      grpc::ByteBuffer bytes;
      bool own_buffer = false;
      grpc::SerializationTraits<v1::GenerateStreamResponse>::Serialize(current_message_, &bytes,
                                                                       &own_buffer);
      current_.Swap(&bytes);
      StartWrite(&current_);
    }
    if (next.action == Next::kFinish) Finish(next.status);
  }

  std::deque<v1::GenerateStreamResponse> pending_;  // guarded by mutex_
  v1::GenerateStreamResponse current_message_;      // owned by the write in flight
  grpc::ByteBuffer current_;                        // its bytes, likewise
  bool writing_ = false;                            // guarded by mutex_
  bool broken_ = false;                             // guarded by mutex_
};

// A stream refused before it started.
class RefusedStreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* BlossomService::Generate(grpc::CallbackServerContext* context,
                                                   const v1::GenerateRequest* request,
                                                   v1::GenerateResponse* response) {
  absl::Status admitted = Admit(context, /*generation=*/true);
  if (!admitted.ok()) {
    if (metrics_) metrics_->CountRequest(StatusCodeLabel(admitted.code()));
    return RefuseUnary(ToGrpcStatus(admitted));
  }
  in_flight_.fetch_add(1);
  return new UnaryGenerateReactor(this, context, request, response,
                                  RequestIdFor(context, *request), options_.limits);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* BlossomService::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes) {
  // In the unary RPCs' order (their undecodable requests are answered by the interceptor, which
  // authenticates only): the caller's key, then the bytes, then the server's state.
  absl::Status admitted = Authenticate(context->client_metadata());
  v1::GenerateStreamRequest stream_request;
  if (admitted.ok()) {
    // A call half-closed without a message has no buffer; an empty message has an empty one.
    bool decoded = request_bytes != nullptr && request_bytes->Valid();
    if (decoded) {
      grpc::ByteBuffer bytes(*request_bytes);  // Deserialize consumes its argument
      decoded = grpc::SerializationTraits<v1::GenerateStreamRequest>::Deserialize(
                    &bytes, &stream_request)
                    .ok();
    }
    if (!decoded) {
      admitted = UndecodableRequestStatus(kGenerateStreamMethod);
      spdlog::info("{} refused: {} {}", kGenerateStreamMethod, StatusCodeLabel(admitted.code()),
                   std::string(admitted.message()));
    }
  }
  if (admitted.ok()) admitted = AdmitState(/*generation=*/true);
  if (!admitted.ok()) {
    if (metrics_) metrics_->CountRequest(StatusCodeLabel(admitted.code()));
    return new RefusedStreamReactor(ToGrpcStatus(admitted));
  }
  in_flight_.fetch_add(1);
  const v1::GenerateRequest request = v1::FromStreamRequest(stream_request);
  return new StreamGenerateReactor(this, context, &request, RequestIdFor(context, request),
                                   options_.limits);
}

}  // namespace blossom
