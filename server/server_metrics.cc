#include "server/server_metrics.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "server/metrics/process_metrics.h"

namespace blossom {
namespace {

double Seconds(Clock::time_point from, Clock::time_point to) {
  if (from == Clock::time_point{} || to == Clock::time_point{} || to < from) return -1.0;
  return std::chrono::duration<double>(to - from).count();
}

// Request latency buckets from 1 ms to ~17.5 min (x2): fine enough for TTFT on a CPU and an H100
// alike, and past the gateway's 600 s default deadline, so that a long generation lands in a
// finite bucket instead of +Inf (where histogram_quantile would report the top bound).
std::vector<double> LatencyBuckets() { return metrics::ExponentialBuckets(0.001, 2.0, 21); }
std::vector<double> TokenCountBuckets() { return metrics::ExponentialBuckets(1.0, 2.0, 16); }

// OutcomeLabel's values.
constexpr const char* kEngineOutcomes[] = {"finished", "cancelled", "error", "aborted"};

}  // namespace

const char* OutcomeLabel(FinishReason reason) {
  switch (reason) {
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kAborted: return "aborted";
    case FinishReason::kNone:
    case FinishReason::kLength:
    case FinishReason::kEosToken:
    case FinishReason::kStopToken:
    case FinishReason::kStopString: break;
  }
  return "finished";
}

const char* OutcomeLabel(const EngineEvent& final_event) {
  if (final_event.finish_reason == FinishReason::kError &&
      final_event.status.code() == absl::StatusCode::kFailedPrecondition) {
    return "failed_precondition";
  }
  return OutcomeLabel(final_event.finish_reason);
}

const char* StatusCodeLabel(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return "ok";
    case absl::StatusCode::kCancelled: return "cancelled";
    case absl::StatusCode::kInvalidArgument: return "invalid_argument";
    case absl::StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case absl::StatusCode::kNotFound: return "not_found";
    case absl::StatusCode::kOutOfRange: return "out_of_range";
    case absl::StatusCode::kResourceExhausted: return "resource_exhausted";
    case absl::StatusCode::kUnauthenticated: return "unauthenticated";
    case absl::StatusCode::kPermissionDenied: return "permission_denied";
    case absl::StatusCode::kUnavailable: return "unavailable";
    case absl::StatusCode::kUnimplemented: return "unimplemented";
    case absl::StatusCode::kFailedPrecondition: return "failed_precondition";
    default: return "internal";
  }
}

bool IsEngineOutcome(const std::string& outcome) {
  return std::find(std::begin(kEngineOutcomes), std::end(kEngineOutcomes), outcome) !=
         std::end(kEngineOutcomes);
}

// Every series carries model_name first (vLLM's convention), then its own labels.
std::vector<std::string> ServerMetrics::Labels(std::vector<std::string> rest) {
  rest.insert(rest.begin(), "model_name");
  return rest;
}

ServerMetrics::ServerMetrics(metrics::Registry* registry, std::string model_name,
                             std::string version)
    : model_(std::move(model_name)),
      registry_(registry),
      ttft_(registry->AddHistogram("blossom_time_to_first_token_seconds",
                                   "Arrival to first generated token.", LatencyBuckets(),
                                   Labels())),
      itl_(registry->AddHistogram("blossom_inter_token_latency_seconds",
                                  "Time between consecutive steps that gave a request tokens (several tokens of one step, "
                                  "accepted speculative drafts, count once).",
                                  metrics::ExponentialBuckets(0.0005, 2.0, 16), Labels())),
      e2e_(registry->AddHistogram("blossom_e2e_request_latency_seconds",
                                  "Arrival to final response.", LatencyBuckets(), Labels())),
      queue_(registry->AddHistogram("blossom_request_queue_time_seconds",
                                    "Arrival to first scheduling.", LatencyBuckets(), Labels())),
      step_(registry->AddHistogram(
          "blossom_step_duration_seconds",
          "Duration of one engine step's forward pass (model execution; the host work is "
          "blossom_step_host_seconds), by phase.",
          metrics::ExponentialBuckets(0.0005, 2.0, 16), Labels({"phase"}))),
      step_host_(registry->AddHistogram(
          "blossom_step_host_seconds",
          "Engine work of one step outside the forward, by phase and part: schedule (planning "
          "and the batch), sample (the sampler's call), output (stop rules, detokenization, the "
          "scheduler's update), deliver (handing the previous step's events to the delivery "
          "thread, which streams them while this step runs: it waits only when that thread is "
          "a step behind).",
          metrics::ExponentialBuckets(0.00002, 2.0, 16), Labels({"phase", "part"}))),
      batch_size_(registry->AddHistogram("blossom_batch_size", "Sequences in one engine step.",
                                         TokenCountBuckets(), Labels())),
      prompt_len_(registry->AddHistogram("blossom_request_prompt_tokens",
                                         "Prompt length of finished requests.", TokenCountBuckets(),
                                         Labels())),
      output_len_(registry->AddHistogram("blossom_request_generated_tokens",
                                         "Generated tokens of finished requests.",
                                         TokenCountBuckets(), Labels())),
      running_(registry->AddGauge("blossom_num_requests_running", "Sequences being computed.",
                                  Labels())),
      waiting_(
          registry->AddGauge("blossom_num_requests_waiting", "Sequences in the queue.", Labels())),
      kv_usage_(registry->AddGauge("blossom_kv_cache_usage_ratio",
                                   "Fraction of KV blocks in use (0-1).", Labels())),
      kv_blocks_used_(
          registry->AddGauge("blossom_kv_cache_blocks_used", "KV blocks in use.", Labels())),
      guided_preparing_(registry->AddGauge(
          "blossom_guided_requests_preparing",
          "Structured-output requests waiting for, or in, a constraint compile.", Labels())),
      prompt_tokens_(registry->AddCounter(
          "blossom_prompt_tokens_total",
          "Prompt tokens of requests whose prefill finished (counted at their first token).",
          Labels())),
      generated_tokens_(registry->AddCounter("blossom_generation_tokens_total",
                                             "Generated tokens (counted every step).", Labels())),
      preemptions_(registry->AddCounter("blossom_preemptions_total",
                                        "Sequences preempted (by recompute).", Labels())),
      prefix_queries_(registry->AddCounter(
          "blossom_prefix_cache_queries_total",
          "Deprecated alias of blossom_prefix_cache_query_tokens_total.", Labels())),
      prefix_hits_(registry->AddCounter(
          "blossom_prefix_cache_hits_total",
          "Deprecated alias of blossom_prefix_cache_hit_tokens_total.", Labels())),
      requests_(registry->AddCounter("blossom_requests_total", "Requests by outcome.",
                                     Labels({"outcome"}))),
      steps_(
          registry->AddCounter("blossom_steps_total", "Engine steps by phase.", Labels({"phase"}))),
      prefill_time_(registry->AddHistogram("blossom_request_prefill_time_seconds",
                                           "First scheduling to first token (the prefill).",
                                           LatencyBuckets(), Labels())),
      decode_time_(registry->AddHistogram("blossom_request_decode_time_seconds",
                                          "First token to the last (the decode phase).",
                                          LatencyBuckets(), Labels())),
      max_tokens_(registry->AddHistogram("blossom_request_max_tokens",
                                         "The max_new_tokens each request asked for.",
                                         TokenCountBuckets(), Labels())),
      prefix_query_tokens_(registry->AddCounter("blossom_prefix_cache_query_tokens_total",
                                                "Prompt tokens looked up in the prefix cache.",
                                                Labels())),
      prefix_hit_tokens_(registry->AddCounter("blossom_prefix_cache_hit_tokens_total",
                                              "Prompt tokens found in the prefix cache.",
                                              Labels())),
      draft_tokens_(registry->AddCounter(
          "blossom_spec_decode_draft_tokens_total",
          "Draft tokens computed for speculative decoding (--speculative_tokens).", Labels())),
      accepted_draft_tokens_(registry->AddCounter(
          "blossom_spec_decode_accepted_tokens_total",
          "Draft tokens the model sampled itself (kept: each saved a step).", Labels())) {
  metrics::RegisterProcessMetrics(registry);
  metrics::RegisterBuildInfo(registry, "blossom_build_info",
                             "The running server: version and served model (value 1).",
                             {{"model_name", model_}, {"version", version}});
  // Create the zero-valued children up front so dashboards see them before the first request.
  for (const char* outcome : kEngineOutcomes) requests_.Get({model_, outcome});
  for (const char* phase : {"prefill", "decode", "mixed"}) {
    step_.Get({model_, phase});
    steps_.Get({model_, phase});
    for (const char* part : {"schedule", "sample", "output", "deliver"}) {
      step_host_.Get({model_, phase, part});
    }
  }
  for (auto* family : {&ttft_, &itl_, &e2e_, &queue_, &batch_size_, &prompt_len_, &output_len_,
                       &prefill_time_, &decode_time_, &max_tokens_}) {
    family->Get({model_});
  }
  for (auto* family : {&running_, &waiting_, &kv_usage_, &kv_blocks_used_, &guided_preparing_}) {
    family->Get({model_});
  }
  for (auto* family : {&prompt_tokens_, &generated_tokens_, &preemptions_, &prefix_queries_,
                       &prefix_hits_, &prefix_query_tokens_, &prefix_hit_tokens_, &draft_tokens_,
                       &accepted_draft_tokens_}) {
    family->Get({model_});
  }
}

void ServerMetrics::OnStep(const StepStats& step) {
  const char* phase =
      step.prefill_tokens > 0 ? (step.decode_tokens > 0 ? "mixed" : "prefill") : "decode";
  step_.Get({model_, phase}).Observe(step.duration_seconds);
  step_host_.Get({model_, phase, "schedule"}).Observe(step.schedule_seconds);
  step_host_.Get({model_, phase, "sample"}).Observe(step.sample_seconds);
  step_host_.Get({model_, phase, "output"}).Observe(step.output_seconds);
  step_host_.Get({model_, phase, "deliver"}).Observe(step.deliver_seconds);
  steps_.Get({model_, phase}).Increment();
  batch_size_.Get({model_}).Observe(step.batch_size);
  // Token counters advance every step (not at request end), so rate() over them is smooth.
  if (step.finished_prompt_tokens > 0) {
    prompt_tokens_.Get({model_}).Increment(step.finished_prompt_tokens);
  }
  if (step.generated_tokens > 0) generated_tokens_.Get({model_}).Increment(step.generated_tokens);
  if (step.draft_tokens > 0) draft_tokens_.Get({model_}).Increment(step.draft_tokens);
  if (step.accepted_draft_tokens > 0) {
    accepted_draft_tokens_.Get({model_}).Increment(step.accepted_draft_tokens);
  }
  running_.Get({model_}).Set(static_cast<double>(step.running));
  waiting_.Get({model_}).Set(static_cast<double>(step.waiting));
  kv_blocks_used_.Get({model_}).Set(static_cast<double>(step.blocks_used));
  kv_usage_.Get({model_}).Set(step.blocks_total > 0 ? static_cast<double>(step.blocks_used) /
                                                          static_cast<double>(step.blocks_total)
                                                    : 0.0);
}

void ServerMetrics::UpdateSchedulerTotals(const SchedulerStats& stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto advance = [this](metrics::Family<metrics::Counter>& counter, int64_t now, int64_t before) {
    if (now > before) counter.Get({model_}).Increment(static_cast<double>(now - before));
  };
  advance(preemptions_, stats.num_preemptions, last_totals_.num_preemptions);
  advance(prefix_queries_, stats.prefix_cache_queries_tokens,
          last_totals_.prefix_cache_queries_tokens);
  advance(prefix_hits_, stats.prefix_cache_hit_tokens, last_totals_.prefix_cache_hit_tokens);
  advance(prefix_query_tokens_, stats.prefix_cache_queries_tokens,
          last_totals_.prefix_cache_queries_tokens);
  advance(prefix_hit_tokens_, stats.prefix_cache_hit_tokens, last_totals_.prefix_cache_hit_tokens);
  running_.Get({model_}).Set(static_cast<double>(stats.running));
  waiting_.Get({model_}).Set(static_cast<double>(stats.waiting));
  kv_blocks_used_.Get({model_}).Set(static_cast<double>(stats.blocks_used));
  kv_usage_.Get({model_}).Set(stats.blocks_total > 0 ? static_cast<double>(stats.blocks_used) /
                                                           static_cast<double>(stats.blocks_total)
                                                     : 0.0);
  last_totals_ = stats;
}

void ServerMetrics::OnFirstToken(const RequestTimings& t, bool beam_round) {
  if (beam_round) return;  // a search's rounds are not requests of their own
  const double ttft = Seconds(t.arrival, t.first_token);
  if (ttft >= 0) ttft_.Get({model_}).Observe(ttft);
  const double queue = Seconds(t.arrival, t.first_scheduled);
  if (queue >= 0) queue_.Get({model_}).Observe(queue);
  const double prefill = Seconds(t.first_scheduled, t.first_token);
  if (prefill >= 0) prefill_time_.Get({model_}).Observe(prefill);
}

void ServerMetrics::OnRequestFinished(const EngineEvent& final_event) {
  if (final_event.beam_round) return;  // counted once for its search (ObserveBeamSearch)
  const RequestTimings& t = final_event.timings;
  const double e2e = Seconds(t.arrival, t.finished);
  if (e2e >= 0) e2e_.Get({model_}).Observe(e2e);
  const double decode = Seconds(t.first_token, t.finished);
  if (decode >= 0) decode_time_.Get({model_}).Observe(decode);
  if (final_event.max_new_tokens > 0) max_tokens_.Get({model_}).Observe(final_event.max_new_tokens);
  prompt_len_.Get({model_}).Observe(final_event.usage.prompt_tokens);
  output_len_.Get({model_}).Observe(final_event.usage.generated_tokens);
  requests_.Get({model_, OutcomeLabel(final_event)}).Increment();
}

void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  itl_.Get({model_}).Observe(seconds);
}

void ServerMetrics::ObserveBeamSearch(double e2e_seconds, int32_t prompt_tokens,
                                      int32_t output_tokens, int32_t max_new_tokens,
                                      const std::string& outcome) {
  e2e_.Get({model_}).Observe(e2e_seconds);
  if (max_new_tokens > 0) max_tokens_.Get({model_}).Observe(max_new_tokens);
  // Its rounds are left out of the steps' prompt counts (StepStats::finished_prompt_tokens).
  if (prompt_tokens > 0) prompt_tokens_.Get({model_}).Increment(prompt_tokens);
  prompt_len_.Get({model_}).Observe(prompt_tokens);
  output_len_.Get({model_}).Observe(output_tokens);
  requests_.Get({model_, outcome}).Increment();
}

void ServerMetrics::CountRequest(const std::string& outcome) {
  requests_.Get({model_, outcome}).Increment();
}

void ServerMetrics::AddGuidedPreparing(int delta) {
  guided_preparing_.Get({model_}).Add(static_cast<double>(delta));
}

}  // namespace blossom
