// The serving engine: continuous batching over a paged KV cache, one loop thread.
//
// Submit() validates a request and admits it to the scheduler (or refuses it at once:
// InvalidArgument for a request that is malformed or can never fit, FailedPrecondition for one
// whose own masks and bans leave no first token to sample (logit_edits' CheckSomeTokenPossible:
// the code its first step would fail with), ResourceExhausted when the waiting queue is full). Each step the loop asks the scheduler for a plan (decode tokens of
// running sequences plus chunked prefill of waiting ones), runs the model once for the whole
// plan, samples a token for every sequence whose chunk reached its last known token (one
// BatchSampler call for the whole step, on the logits where the runner's backend left them:
// EngineConfig::device_sampling), applies its stop rules, and closes the loop with
// Scheduler::Update. Prompt logprobs are scored by the same sampler (BatchSampler::ScoreRows), so
// no logits row leaves the device. Finished and cancelled requests release their KV blocks at
// once.
// Speculative decoding (EngineConfig::speculative, prompt lookup): while few sequences run,
// each decode entry may carry draft tokens (engine/speculative) computed in the same step; the
// engine then samples the draft positions' rows one after the other, exactly as it would have
// sampled them in later steps (same rows, same processors, same generator draws), and keeps the
// drafts up to the first one the model did not sample itself. Tokens, logprobs and seeded
// streams are the same with speculation on or off (on the CPU backend, bit for bit: a row's
// logits do not depend on the other rows of its step); only the number of steps changes.
// A failed step ends the requests in it (kError). If the runner then reports itself unusable for
// good (ModelRunner::Health: a broken tensor-parallel group, a sticky device error), every
// other request ends too, Submit refuses with Unavailable from then on, and the observer hears
// OnEngineFailed once: otherwise each later request would be admitted only to fail.
// Preemption (by recompute) is invisible to clients: a preempted sequence keeps its sampled
// tokens and its per-request RNG, and its recomputed KV is bit-identical on the CPU backend.
//
// Events of a request: one per generated token (text delta, optional logprobs, timestamp), the
// last one marked finished with the finish reason, usage and timings. A cancelled, failed or
// aborted (Shutdown) request gets a final event without a token.
//
// Thread-safety: Submit, Cancel, stats and Shutdown may be called from any thread. The model and
// sampling run on the engine thread. A step's events go to their sinks and streams on a second
// thread, the deliverer (HandoffThread), while the engine thread schedules and runs the next
// step; it keeps their order and is at most one step behind (Hand() blocks past that). Cancel
// and Shutdown deliver their final events on the caller's thread (Shutdown after the deliverer
// has drained). mutex_ guards the scheduler and request table; it is NOT held during the
// forward pass, so submissions never wait for a step. num_unfinished() counts a request until
// its final event is being delivered.
#ifndef BLOSSOM_ENGINE_SERVING_ENGINE_H_
#define BLOSSOM_ENGINE_SERVING_ENGINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/generate/sequence_output.h"
#include "engine/model/model_runner.h"
#include "engine/sampling/batch_sampler.h"
#include "engine/scheduler/scheduler.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/serving/handoff_thread.h"
#include "engine/tokenizer/tokenizer.h"

namespace blossom {

using Clock = std::chrono::steady_clock;

struct EngineConfig {
  SchedulerConfig scheduler;  // num_blocks = 0: sized from kv_cache_bytes
  int64_t kv_cache_bytes = 256ll << 20;
  // Sample each step's logits where the runner's backend left them
  // (ModelRunner::ForwardKeepLogits and MakeBatchSampler): on the GPU for "cuda", where only the
  // token ids and the logprobs asked for come back (prompt logprobs too); on the CPU backend
  // the logits are host memory already, so the results are bit-identical either way. false: copy every step's logits to the host and sample there
  // (HostBatchSampler), as before device sampling existed.
  bool device_sampling = true;
  // Speculative decoding by prompt lookup (num_speculative_tokens 0: off). Drafts are proposed
  // only while at most speculative_max_running sequences run: decode steps are bound by reading
  // the weights there, so verifying drafts costs little; in large batches it would cost compute.
  NgramProposerConfig speculative;
  int32_t speculative_max_running = 4;
  // A request with prompt logprobs needs a logits row per prompt token: the prefill chunks of
  // all such requests in one step hold at most this many tokens together, so that a step's
  // logits stay bounded (BLOOM's 250,880 fp32 logits are 1 MB a row: a 2,048-token step of them
  // would be 2 GB, on the GPU and the host). Lifted for a request once its prompt is scored;
  // never set for a one-token prompt (nothing to score).
  int32_t max_prompt_logprob_rows = 256;
};

struct EngineRequest {
  std::vector<int32_t> prompt_tokens;
  SamplingParams sampling;
  StoppingParams stopping;
  int32_t priority = 0;  // lower runs first
  // One round of a beam search (engine/serving/beam_search): a step of a client's request, not
  // a request of its own, so request-level metrics leave it out (EngineEvent::beam_round).
  bool beam_round = false;
  // Work already admitted (a beam search's rounds after its first): queued even when the
  // waiting queue is full (SequenceSpec::bypass_waiting_limits).
  bool bypass_waiting_limits = false;
};

struct RequestTimings {
  Clock::time_point arrival{}, first_scheduled{}, first_token{}, finished{};
  int32_t num_preemptions = 0;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  // Prompt tokens whose KV came from the prefix cache at the request's first admission.
  int32_t cached_prompt_tokens = 0;
};

// The logprob of one prompt token given the tokens before it, and the top alternatives there
// (SamplingParams::prompt_logprobs).
struct PromptLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;  // 1-based rank of `token` in the row (SampleResult::rank)
  std::vector<TokenLogprob> top;
};

struct EngineEvent {
  uint64_t request_id = 0;
  bool has_token = false;
  TokenEvent token;  // valid when has_token
  Clock::time_point time{};
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;  // non-OK for kError and kAborted
  Usage usage;            // on the final event
  RequestTimings timings;  // on the final event
  uint64_t seed = 0;       // on the final event: the sampling seed used (drawn if none given)
  // With sampling.prompt_logprobs >= 0, on the first event that has a token: prompt tokens 1 to
  // n - 1 in order (the first prompt token has nothing before it, so no logprob).
  std::vector<PromptLogprob> prompt_logprobs;
  int32_t max_new_tokens = 0;  // on the final event: the request's stopping.max_new_tokens
  bool beam_round = false;     // on the final event: the request's beam_round
};

// UNAVAILABLE, marked as the engine's shutdown: the status of a request Shutdown ended
// (kAborted) and of a Submit refused after it. The mark (a payload, not a "type.googleapis.com/"
// one, so ToGrpcStatus never sends it) tells such a request, which another server may run, from
// one of a model that failed for good, also where only the status travels (a beam search's
// outcome).
inline constexpr char kEngineShutdownPayload[] = "blossom.dev/engine-shutdown";
inline absl::Status EngineShutdownError(absl::string_view message) {
  absl::Status status = absl::UnavailableError(message);
  status.SetPayload(kEngineShutdownPayload, absl::Cord());
  return status;
}
inline bool IsEngineShutdown(const absl::Status& status) {
  return status.GetPayload(kEngineShutdownPayload).has_value();
}

// Receives events on the engine's delivery thread (a cancelled or shut-down request's final
// event: on the thread that called Cancel or Shutdown); must not block for long.
using EventSink = std::function<void(const EngineEvent&)>;

// A request's event stream, for callers that prefer pulling to a sink. Thread-safe.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }
  // Blocks until an event arrives; false once the final event has been returned.
  bool Next(EngineEvent* event);
  // Like Next, but gives up after `timeout` (returns false with *timed_out = true).
  bool NextFor(EngineEvent* event, std::chrono::milliseconds timeout, bool* timed_out);
  void Push(EngineEvent event);

 private:
  const uint64_t id_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
  bool final_taken_ = false;
};

struct StepStats {
  int32_t batch_size = 0;
  int32_t prefill_tokens = 0;
  int32_t decode_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  // Tokens sampled this step, and the prompt tokens of requests whose first token came this step
  // (their prefill is done; beam-search rounds left out): per-step token counts for smooth
  // rate()s.
  int32_t generated_tokens = 0;
  int32_t finished_prompt_tokens = 0;
  // Speculative decoding: draft tokens computed this step, and those the sampler confirmed
  // (each accepted draft is one of generated_tokens that needed no step of its own).
  int32_t draft_tokens = 0;
  int32_t accepted_draft_tokens = 0;
  double duration_seconds = 0.0;  // the forward (the model's step, to its logits)
  // The engine's own work around the forward, on the engine thread: planning the step and
  // building its batch (schedule), the sampler's call (sample: on the GPU with device sampling),
  // and the rest up to this report (stop rules, detokenization, the scheduler's update: output).
  // The events go to their streams on the delivery thread while the next step runs; what that
  // adds to the engine thread is `deliver`: handing the previous step's events over, which
  // waits only when the deliverer is still a whole step behind.
  double schedule_seconds = 0.0, sample_seconds = 0.0, output_seconds = 0.0;
  double deliver_seconds = 0.0;
  int64_t blocks_used = 0, blocks_total = 0;
  int32_t preemptions = 0;
  int64_t running = 0, waiting = 0;
};

// Hooks for metrics and logs, called on the engine thread.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnStep(const StepStats&) {}
  virtual void OnRequestFinished(const EngineEvent& final_event) { (void)final_event; }
  // When a request's first token is sampled (its arrival, first scheduling and first token are
  // set): time-to-first-token is known then, possibly long before the request ends.
  virtual void OnFirstToken(const RequestTimings& timings, bool beam_round) {
    (void)timings;
    (void)beam_round;
  }
  // Once, when a failed step left the runner unable to run again (ModelRunner::Health): the
  // engine has failed every request and refuses new ones; the process must be restarted.
  virtual void OnEngineFailed(const absl::Status& failure) { (void)failure; }
};

class Engine {
 public:
  // `runner` and `tokenizer` must outlive the engine. `observer` may be null. The engine
  // allocates the runner's KV cache (on every rank) and uses the runner exclusively until it is
  // destroyed.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(ModelRunner* runner,
                                                        const Tokenizer* tokenizer,
                                                        const EngineConfig& config,
                                                        EngineObserver* observer = nullptr);
  ~Engine();  // Shutdown()

  // With a sink, events are delivered to it (and the returned stream stays empty); otherwise
  // they are queued on the returned stream.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(EngineRequest request,
                                                        EventSink sink = nullptr);
  // Cancels a waiting or running request: its blocks are freed at once and its stream ends with
  // finish reason kCancelled. False if the id is unknown or already finished.
  bool Cancel(uint64_t request_id);
  // Ends every unfinished request (waiting or running) with kAborted and an
  // EngineShutdownError, and stops the loop; from then on Submit refuses with one too.
  void Shutdown();

  SchedulerStats scheduler_stats() const;
  // OK, or why the runner failed for good (then every Submit is refused with Unavailable).
  absl::Status failure() const;
  int64_t num_unfinished() const;
  const SchedulerConfig& scheduler_config() const { return config_.scheduler; }
  // The model's vocabulary size: token ids lie in [0, vocab_size()).
  int32_t vocab_size() const { return static_cast<int32_t>(runner_->vocab_size()); }
  // The model's end tokens (BloomConfig::eos_token_ids): each ends a generation unless
  // ignore_eos, and a beam search's callers make them its end tokens. Valid while the engine is.
  absl::Span<const int32_t> end_token_ids() const { return runner_->config().eos_token_ids; }
  // OK when a request of `prompt_tokens` and `max_new_tokens` could run (the InvalidArgument
  // checks of Submit's capacity: max_total_tokens, the KV cache, the prefill budget).
  absl::Status CheckFits(int64_t prompt_tokens, int32_t max_new_tokens) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return scheduler_->CheckFits(prompt_tokens, max_new_tokens);
  }
  // Scheduler::CheckWaitingRoom now.
  absl::Status CheckWaitingRoom(int64_t requests, int64_t tokens) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return scheduler_->CheckWaitingRoom(requests, tokens);
  }

 private:
  struct Request;
  Engine(ModelRunner* runner, const Tokenizer* tokenizer, const EngineConfig& config,
         EngineObserver* observer);
  struct Pending;  // an event and the delivery of its request
  void Loop();
  // Delivers `batch` in order, on the calling thread, and counts its final events out of
  // undelivered_finals_. Without mutex_.
  void DeliverNow(std::vector<Pending>& batch);
  // Runs the step: the logits where the runner left them (device_sampling), or copied into
  // `host_logits` and viewed from there. Engine thread, without mutex_.
  absl::StatusOr<Tensor> ForwardStep(const StepBatch& batch, std::vector<float>& host_logits);
  // Scores the prompt tokens that this step's rows (the whole chunk of `s`, from logit row
  // `first_row` on) predict and that are not scored yet, into request.prompt_lp, through the
  // sampler where the logits lie (BatchSampler::ScoreRows: on the GPU only the scores come
  // back). Before the step's sampling, which may edit rows in place. Requires mutex_.
  absl::Status ScorePromptRowsLocked(Request& request, const ScheduledSeq& s,
                                     const Tensor& logits, int64_t first_row);
  // Samples the step's tokens in rounds (SampleInRounds, engine/speculative:draft_rounds) and
  // runs each through its request's stop rules, in plan order. Round 0 samples `rows` (rows[j]
  // is plan.seqs[seq_of[j]]'s); a sequence whose token is its next draft goes on to the next
  // round with that draft's row. Fills `outputs` (token, accepted drafts, finished), queues the
  // events on `pending`, and adds to step's sample time and token counts. Returns whether a
  // request ended with an error. Requires mutex_.
  bool SampleRoundsLocked(const StepPlan& plan, const Tensor& logits, Clock::time_point step_end,
                          std::vector<size_t> seq_of, std::vector<SampleRow> rows,
                          std::vector<SeqOutput>& outputs, std::vector<Pending>& pending,
                          StepStats& step);
  // Marks `event` final and fills its usage and timings. Requires mutex_.
  void FinishLocked(Request& request, EngineEvent* event);
  // Ends a request before its stop rules did (cancel, failure, shutdown): frees its KV blocks,
  // puts held-back text in the final event, tells the observer. The caller erases the request
  // and delivers the event. Requires mutex_.
  EngineEvent EndEarlyLocked(Request& request, FinishReason reason, absl::Status status);
  // After a failed step: when the runner is unusable for good, records failure_ and ends every
  // request (their events onto `pending`); returns whether it did. Requires mutex_.
  bool FailForGoodLocked(std::vector<Pending>& pending);

  ModelRunner* runner_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  EngineObserver* observer_;
  // Every token of a step in one call, on the logits where ForwardStep left them: the runner's
  // sampler (MakeBatchSampler: host, or cuda_batch_sampler on a GPU) with device_sampling, else
  // the host sampler. Set by Create; engine thread only after that.
  std::unique_ptr<BatchSampler> sampler_;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::unique_ptr<Scheduler> scheduler_;                              // guarded by mutex_
  absl::flat_hash_map<uint64_t, std::unique_ptr<Request>> requests_;  // guarded by mutex_
  uint64_t next_id_ = 1;                                              // guarded by mutex_
  bool stopping_ = false;                                             // guarded by mutex_
  absl::Status failure_;  // guarded by mutex_; set once when the runner fails for good
  // Final events taken out of requests_ (under mutex_) and not yet handed to their sink or
  // stream: with them, num_unfinished() does not reach 0 while final events wait with the
  // deliverer.
  std::atomic<int64_t> undelivered_finals_{0};
  // Each step's events, delivered on this worker while the next step runs (streaming off the
  // engine thread's critical path). Declared after what its batches use.
  std::unique_ptr<HandoffThread<Pending>> deliverer_;
  std::thread thread_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SERVING_ENGINE_H_
