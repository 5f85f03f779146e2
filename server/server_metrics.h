// The server's Prometheus metrics: what the engine reports per step (through EngineObserver)
// and what the gRPC edge sees per request (latencies, outcomes).
//
// Names follow the vLLM/TGI conventions in ../shared/reference/serving.md, under the
// `blossom_` prefix, each with a model_name label (vLLM's convention). Token counters advance
// every step; prefix-cache counters count tokens (the old *_queries_total / *_hits_total names
// are kept as aliases). Counters that mirror cumulative scheduler statistics (preemptions,
// prefix-cache queries and hits) are advanced by the difference since the previous step, so
// they stay monotonic even though the scheduler only exposes totals.
//
// Thread-safety: every method may be called from any thread (the metrics library is
// thread-safe; the previous-step totals are guarded by mutex_).
#ifndef BLOSSOM_SERVER_SERVER_METRICS_H_
#define BLOSSOM_SERVER_SERVER_METRICS_H_

#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "engine/serving/engine.h"
#include "server/metrics/metrics.h"

namespace blossom {

// The blossom_requests_total outcome of a request the engine ended: "finished", "cancelled" (by
// its client), "error" (the model or the engine failed) or "aborted" (the server's shutdown cut
// it: no failure, so error-rate alerts should leave it out).
const char* OutcomeLabel(FinishReason reason);
// The same for a final event, except that a request the engine ended with an error its own
// parameters caused (the sampler found no token its masks and bans allow: FAILED_PRECONDITION,
// which the gRPC edge reports as NO_TOKEN_POSSIBLE) counts as "failed_precondition", as the same
// request refused at admission does: "error" stays the model's and the engine's failures, which
// error-rate alerts watch (an INVALID_ARGUMENT from the engine at that point is an engine bug, a
// sampler row it could not take, and stays "error"). What blossom_requests_total counts.
const char* OutcomeLabel(const EngineEvent& final_event);
// The blossom_requests_total outcome of a call refused with `code` ("invalid_argument", ...).
const char* StatusCodeLabel(absl::StatusCode code);
// Whether `outcome` is one of OutcomeLabel's rather than a refusal's (a status code label).
bool IsEngineOutcome(const std::string& outcome);

class ServerMetrics : public EngineObserver {
 public:
  // Every blossom_ series is labelled model_name="<model_name>"; also registers the process_*
  // metrics and blossom_build_info{model_name, version} on `registry`.
  explicit ServerMetrics(metrics::Registry* registry, std::string model_name = "",
                         std::string version = "");

  // Engine thread.
  void OnStep(const StepStats& step) override;
  void OnRequestFinished(const EngineEvent& final_event) override;
  // TTFT, queue and prefill time, observed at the first token (as vLLM), not when the request
  // ends: a stream of minutes would otherwise show its TTFT only after its last token.
  void OnFirstToken(const RequestTimings& timings, bool beam_round) override;

  // gRPC edge: one call per step that gave the request tokens (seconds since the previous one),
  // and one per request outcome (OutcomeLabel's, or a refusal such as "invalid_argument",
  // "resource_exhausted", "unavailable", "unauthenticated").
  void ObserveInterTokenLatency(double seconds);
  void CountRequest(const std::string& outcome);
  // A beam search, once it ended: one request (its rounds are engine requests that
  // OnRequestFinished leaves out), with its latency, prompt and returned tokens, max_new_tokens
  // and outcome. No time to first token or decode time: a search returns its beams at the end.
  void ObserveBeamSearch(double e2e_seconds, int32_t prompt_tokens, int32_t output_tokens,
                         int32_t max_new_tokens, const std::string& outcome);
  // Cumulative scheduler totals, sampled after each step.
  void UpdateSchedulerTotals(const SchedulerStats& stats);
  // Structured-output requests entering (+1) or leaving (-1) the compile pool
  // (BlossomService::compile_pool): blossom_guided_requests_preparing.
  void AddGuidedPreparing(int delta);

  metrics::Registry* registry() const { return registry_; }

 private:
  static std::vector<std::string> Labels(std::vector<std::string> rest = {});

  const std::string model_;  // first: the families' label lists are built from it
  metrics::Registry* registry_;
  metrics::Family<metrics::Histogram>& ttft_;
  metrics::Family<metrics::Histogram>& itl_;
  metrics::Family<metrics::Histogram>& e2e_;
  metrics::Family<metrics::Histogram>& queue_;
  metrics::Family<metrics::Histogram>& step_;
  metrics::Family<metrics::Histogram>& step_host_;  // by phase and part (StepStats)
  metrics::Family<metrics::Histogram>& batch_size_;
  metrics::Family<metrics::Histogram>& prompt_len_;
  metrics::Family<metrics::Histogram>& output_len_;
  metrics::Family<metrics::Gauge>& running_;
  metrics::Family<metrics::Gauge>& waiting_;
  metrics::Family<metrics::Gauge>& kv_usage_;
  metrics::Family<metrics::Gauge>& kv_blocks_used_;
  metrics::Family<metrics::Gauge>& guided_preparing_;
  metrics::Family<metrics::Counter>& prompt_tokens_;
  metrics::Family<metrics::Counter>& generated_tokens_;
  metrics::Family<metrics::Counter>& preemptions_;
  metrics::Family<metrics::Counter>& prefix_queries_;
  metrics::Family<metrics::Counter>& prefix_hits_;
  metrics::Family<metrics::Counter>& requests_;
  metrics::Family<metrics::Counter>& steps_;
  metrics::Family<metrics::Histogram>& prefill_time_;
  metrics::Family<metrics::Histogram>& decode_time_;
  metrics::Family<metrics::Histogram>& max_tokens_;
  metrics::Family<metrics::Counter>& prefix_query_tokens_;  // prefix_queries_/_hits_: old names
  metrics::Family<metrics::Counter>& prefix_hit_tokens_;
  metrics::Family<metrics::Counter>& draft_tokens_;
  metrics::Family<metrics::Counter>& accepted_draft_tokens_;

  std::mutex mutex_;
  SchedulerStats last_totals_;  // guarded by mutex_
};

}  // namespace blossom

#endif  // BLOSSOM_SERVER_SERVER_METRICS_H_
