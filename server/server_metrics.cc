#include "server/server_metrics.h"

#include <algorithm>
#include <chrono>

namespace blossom {
namespace {

double Seconds(Clock::time_point from, Clock::time_point to) {
  if (from == Clock::time_point{} || to == Clock::time_point{} || to < from) return -1.0;
  return std::chrono::duration<double>(to - from).count();
}

// Latency buckets from 1 ms to ~65 s (x2), fine enough for TTFT on a CPU and an H100 alike.
std::vector<double> LatencyBuckets() { return metrics::ExponentialBuckets(0.001, 2.0, 17); }
std::vector<double> TokenCountBuckets() { return metrics::ExponentialBuckets(1.0, 2.0, 16); }

}  // namespace

ServerMetrics::ServerMetrics(metrics::Registry* registry)
    : registry_(registry),
      ttft_(registry->AddHistogram("blossom_time_to_first_token_seconds",
                                   "Arrival to first generated token.", LatencyBuckets())),
      itl_(registry->AddHistogram("blossom_inter_token_latency_seconds",
                                  "Time between consecutive tokens of a request.",
                                  metrics::ExponentialBuckets(0.0005, 2.0, 16))),
      e2e_(registry->AddHistogram("blossom_e2e_request_latency_seconds",
                                  "Arrival to final response.", LatencyBuckets())),
      queue_(registry->AddHistogram("blossom_request_queue_time_seconds",
                                    "Arrival to first scheduling.", LatencyBuckets())),
      step_(registry->AddHistogram("blossom_step_duration_seconds",
                                   "Duration of one engine step, by phase.",
                                   metrics::ExponentialBuckets(0.0005, 2.0, 16), {"phase"})),
      batch_size_(registry->AddHistogram("blossom_batch_size",
                                         "Sequences in one engine step.", TokenCountBuckets())),
      prompt_len_(registry->AddHistogram("blossom_request_prompt_tokens",
                                         "Prompt length of finished requests.",
                                         TokenCountBuckets())),
      output_len_(registry->AddHistogram("blossom_request_generated_tokens",
                                         "Generated tokens of finished requests.",
                                         TokenCountBuckets())),
      running_(registry->AddGauge("blossom_num_requests_running", "Sequences being computed.")),
      waiting_(registry->AddGauge("blossom_num_requests_waiting", "Sequences in the queue.")),
      kv_usage_(registry->AddGauge("blossom_kv_cache_usage_ratio",
                                   "Fraction of KV blocks in use (0-1).")),
      kv_blocks_used_(registry->AddGauge("blossom_kv_cache_blocks_used", "KV blocks in use.")),
      prompt_tokens_(registry->AddCounter("blossom_prompt_tokens_total",
                                          "Prompt tokens of finished requests.")),
      generated_tokens_(registry->AddCounter("blossom_generation_tokens_total",
                                             "Generated tokens of finished requests.")),
      preemptions_(registry->AddCounter("blossom_preemptions_total",
                                        "Sequences preempted (by recompute).")),
      prefix_queries_(registry->AddCounter("blossom_prefix_cache_queries_total",
                                           "Prompt tokens looked up in the prefix cache.")),
      prefix_hits_(registry->AddCounter("blossom_prefix_cache_hits_total",
                                        "Prompt tokens found in the prefix cache.")),
      requests_(registry->AddCounter("blossom_requests_total", "Requests by outcome.",
                                     {"outcome"})),
      steps_(registry->AddCounter("blossom_steps_total", "Engine steps by phase.", {"phase"})) {
  // Create the zero-valued children up front so dashboards see them before the first request.
  for (const char* outcome : {"finished", "cancelled", "error"}) requests_.Get({outcome});
  for (const char* phase : {"prefill", "decode", "mixed"}) {
    step_.Get({phase});
    steps_.Get({phase});
  }
  for (auto* family : {&ttft_, &itl_, &e2e_, &queue_, &batch_size_, &prompt_len_, &output_len_}) {
    family->Get({});
  }
  for (auto* family : {&running_, &waiting_, &kv_usage_, &kv_blocks_used_}) family->Get({});
  for (auto* family : {&prompt_tokens_, &generated_tokens_, &preemptions_, &prefix_queries_,
                       &prefix_hits_}) {
    family->Get({});
  }
}

void ServerMetrics::OnStep(const StepStats& step) {
  const char* phase = step.prefill_tokens > 0 ? (step.decode_tokens > 0 ? "mixed" : "prefill")
                                              : "decode";
  step_.Get({phase}).Observe(step.duration_seconds);
  steps_.Get({phase}).Increment();
  batch_size_.Get({}).Observe(step.batch_size);
  running_.Get({}).Set(static_cast<double>(step.running));
  waiting_.Get({}).Set(static_cast<double>(step.waiting));
  kv_blocks_used_.Get({}).Set(static_cast<double>(step.blocks_used));
  kv_usage_.Get({}).Set(step.blocks_total > 0 ? static_cast<double>(step.blocks_used) /
                                                    static_cast<double>(step.blocks_total)
                                              : 0.0);
}

void ServerMetrics::UpdateSchedulerTotals(const SchedulerStats& stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto advance = [](metrics::Family<metrics::Counter>& counter, int64_t now, int64_t before) {
    if (now > before) counter.Get({}).Increment(static_cast<double>(now - before));
  };
  advance(preemptions_, stats.num_preemptions, last_totals_.num_preemptions);
  advance(prefix_queries_, stats.prefix_cache_queries_tokens,
          last_totals_.prefix_cache_queries_tokens);
  advance(prefix_hits_, stats.prefix_cache_hit_tokens, last_totals_.prefix_cache_hit_tokens);
  running_.Get({}).Set(static_cast<double>(stats.running));
  waiting_.Get({}).Set(static_cast<double>(stats.waiting));
  kv_blocks_used_.Get({}).Set(static_cast<double>(stats.blocks_used));
  kv_usage_.Get({}).Set(stats.blocks_total > 0 ? static_cast<double>(stats.blocks_used) /
                                                     static_cast<double>(stats.blocks_total)
                                               : 0.0);
  last_totals_ = stats;
}

void ServerMetrics::OnRequestFinished(const EngineEvent& final_event) {
  const RequestTimings& t = final_event.timings;
  const double ttft = Seconds(t.arrival, t.first_token);
  if (ttft >= 0) ttft_.Get({}).Observe(ttft);
  const double queue = Seconds(t.arrival, t.first_scheduled);
  if (queue >= 0) queue_.Get({}).Observe(queue);
  const double e2e = Seconds(t.arrival, t.finished);
  if (e2e >= 0) e2e_.Get({}).Observe(e2e);
  prompt_tokens_.Get({}).Increment(final_event.usage.prompt_tokens);
  generated_tokens_.Get({}).Increment(final_event.usage.generated_tokens);
  prompt_len_.Get({}).Observe(final_event.usage.prompt_tokens);
  output_len_.Get({}).Observe(final_event.usage.generated_tokens);
  const char* outcome = final_event.finish_reason == FinishReason::kCancelled ? "cancelled"
                        : final_event.finish_reason == FinishReason::kError   ? "error"
                                                                              : "finished";
  requests_.Get({outcome}).Increment();
}

void ServerMetrics::ObserveInterTokenLatency(double seconds) { itl_.Get({}).Observe(seconds); }

void ServerMetrics::CountRequest(const std::string& outcome) { requests_.Get({outcome}).Increment(); }

}  // namespace blossom
