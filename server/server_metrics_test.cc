#include "server/server_metrics.h"

#include "gtest/gtest.h"

namespace blossom {
namespace {

bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(ServerMetricsTest, EverySeriesExistsBeforeTheFirstRequest) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry);
  const std::string text = registry.Render();
  for (const char* line :
       {"blossom_time_to_first_token_seconds_count 0", "blossom_inter_token_latency_seconds_count 0",
        "blossom_e2e_request_latency_seconds_count 0", "blossom_request_queue_time_seconds_count 0",
        "blossom_batch_size_count 0", "blossom_num_requests_running 0",
        "blossom_num_requests_waiting 0", "blossom_kv_cache_usage_ratio 0",
        "blossom_prompt_tokens_total 0", "blossom_generation_tokens_total 0",
        "blossom_preemptions_total 0", "blossom_prefix_cache_queries_total 0",
        "blossom_prefix_cache_hits_total 0", "blossom_requests_total{outcome=\"finished\"} 0",
        "blossom_step_duration_seconds_count{phase=\"decode\"} 0"}) {
    EXPECT_TRUE(Contains(text, line)) << line << "\n" << text;
  }
  EXPECT_TRUE(registry.errors().empty());
}

TEST(ServerMetricsTest, StepsAndRequestsAreRecorded) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry);
  StepStats step;
  step.batch_size = 3;
  step.prefill_tokens = 10;
  step.decode_tokens = 2;
  step.duration_seconds = 0.004;
  step.blocks_used = 5;
  step.blocks_total = 20;
  step.running = 3;
  step.waiting = 1;
  server_metrics.OnStep(step);
  step.prefill_tokens = 0;
  server_metrics.OnStep(step);

  EngineEvent final_event;
  final_event.finished = true;
  final_event.finish_reason = FinishReason::kLength;
  final_event.usage.prompt_tokens = 7;
  final_event.usage.generated_tokens = 4;
  const Clock::time_point t0 = Clock::now();
  final_event.timings.arrival = t0;
  final_event.timings.first_scheduled = t0 + std::chrono::milliseconds(2);
  final_event.timings.first_token = t0 + std::chrono::milliseconds(30);
  final_event.timings.finished = t0 + std::chrono::milliseconds(90);
  server_metrics.OnRequestFinished(final_event);
  final_event.finish_reason = FinishReason::kCancelled;
  final_event.timings.first_token = {};  // cancelled before its first token
  server_metrics.OnRequestFinished(final_event);
  server_metrics.CountRequest("resource_exhausted");
  server_metrics.ObserveInterTokenLatency(0.02);

  SchedulerStats totals;
  totals.num_preemptions = 3;
  totals.prefix_cache_queries_tokens = 100;
  totals.prefix_cache_hit_tokens = 40;
  // Scrape-time totals also refresh the gauges (they are newer than the last step's).
  totals.running = 3;
  totals.blocks_used = 5;
  totals.blocks_total = 20;
  server_metrics.UpdateSchedulerTotals(totals);
  totals.num_preemptions = 5;
  server_metrics.UpdateSchedulerTotals(totals);

  const std::string text = registry.Render();
  for (const char* line :
       {"blossom_step_duration_seconds_count{phase=\"mixed\"} 1",
        "blossom_step_duration_seconds_count{phase=\"decode\"} 1",
        "blossom_steps_total{phase=\"prefill\"} 0", "blossom_batch_size_count 2",
        "blossom_kv_cache_usage_ratio 0.25", "blossom_num_requests_running 3",
        "blossom_time_to_first_token_seconds_count 1",
        "blossom_time_to_first_token_seconds_sum 0.03",
        "blossom_e2e_request_latency_seconds_count 2", "blossom_prompt_tokens_total 14",
        "blossom_generation_tokens_total 8", "blossom_requests_total{outcome=\"finished\"} 1",
        "blossom_requests_total{outcome=\"cancelled\"} 1",
        "blossom_requests_total{outcome=\"resource_exhausted\"} 1",
        "blossom_inter_token_latency_seconds_count 1", "blossom_preemptions_total 5",
        "blossom_prefix_cache_queries_total 100", "blossom_prefix_cache_hits_total 40"}) {
    EXPECT_TRUE(Contains(text, line)) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace blossom
