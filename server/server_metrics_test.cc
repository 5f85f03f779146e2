#include "server/server_metrics.h"

#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "server/metrics/promtool_test_util.h"

namespace blossom {
namespace {

bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(ServerMetricsTest, EverySeriesExistsBeforeTheFirstRequest) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, "m", "9.9");
  const std::string text = registry.Render();
  for (const char* line :
       {"blossom_time_to_first_token_seconds_count{model_name=\"m\"} 0",
        "blossom_inter_token_latency_seconds_count{model_name=\"m\"} 0",
        "blossom_e2e_request_latency_seconds_count{model_name=\"m\"} 0",
        "blossom_request_queue_time_seconds_count{model_name=\"m\"} 0",
        "blossom_batch_size_count{model_name=\"m\"} 0",
        "blossom_num_requests_running{model_name=\"m\"} 0",
        "blossom_num_requests_waiting{model_name=\"m\"} 0",
        "blossom_kv_cache_usage_ratio{model_name=\"m\"} 0",
        "blossom_guided_requests_preparing{model_name=\"m\"} 0",
        "blossom_prompt_tokens_total{model_name=\"m\"} 0",
        "blossom_generation_tokens_total{model_name=\"m\"} 0",
        "blossom_preemptions_total{model_name=\"m\"} 0",
        "blossom_prefix_cache_queries_total{model_name=\"m\"} 0",
        "blossom_prefix_cache_hits_total{model_name=\"m\"} 0",
        "blossom_requests_total{model_name=\"m\",outcome=\"finished\"} 0",
        "blossom_requests_total{model_name=\"m\",outcome=\"error\"} 0",
        "blossom_requests_total{model_name=\"m\",outcome=\"aborted\"} 0",
        "blossom_step_duration_seconds_count{model_name=\"m\",phase=\"decode\"} 0",
        "blossom_step_host_seconds_count{model_name=\"m\",phase=\"prefill\",part=\"sample\"} 0",
        "blossom_step_host_seconds_count{model_name=\"m\",phase=\"decode\",part=\"deliver\"} 0",
        "blossom_prefix_cache_query_tokens_total{model_name=\"m\"} 0",
        "blossom_request_prefill_time_seconds_count{model_name=\"m\"} 0",
        "blossom_build_info{model_name=\"m\",version=\"9.9\"} 1",
        "# TYPE process_cpu_seconds_total counter",
        "process_resident_memory_bytes ",
        "process_open_fds "}) {
    EXPECT_TRUE(Contains(text, line)) << line << "\n" << text;
  }
  EXPECT_TRUE(registry.errors().empty());
}

// Requests may run for the gateway's whole --request-timeout (600 s by default): their latencies
// need finite buckets that far.
TEST(ServerMetricsTest, RequestLatencyBucketsReachPastTheDefaultRequestDeadline) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, "m", "9.9");
  const std::string text = registry.Render();
  for (const char* family :
       {"blossom_time_to_first_token_seconds", "blossom_e2e_request_latency_seconds",
        "blossom_request_queue_time_seconds", "blossom_request_prefill_time_seconds",
        "blossom_request_decode_time_seconds"}) {
    const std::string prefix = std::string(family) + "_bucket{model_name=\"m\",le=\"";
    double largest = 0;
    for (size_t at = text.find(prefix); at != std::string::npos;
         at = text.find(prefix, at + 1)) {
      const std::string bound = text.substr(at + prefix.size(), 32);
      if (bound.rfind("+Inf", 0) != 0) largest = std::max(largest, std::stod(bound));
    }
    EXPECT_GE(largest, 600.0) << family;
  }
}

// A request the engine ended with an error counts as "error" when the model or the engine
// failed, and under its code when its own parameters did (no token its masks allow): the same
// outcome as that request refused at admission, out of the error-rate alerts.
TEST(ServerMetricsTest, ARequestsOwnDeadEndIsNotAnEngineError) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, "m", "v");
  EngineEvent final_event;
  final_event.finished = true;
  final_event.finish_reason = FinishReason::kError;
  final_event.status = absl::InternalError("model step failed");
  server_metrics.OnRequestFinished(final_event);
  // A sampler row the engine could not take is an engine bug, whatever its code.
  final_event.status = absl::InvalidArgumentError("two rows sample logit row 3");
  server_metrics.OnRequestFinished(final_event);
  final_event.status = absl::FailedPreconditionError("no token can be sampled");
  server_metrics.OnRequestFinished(final_event);
  server_metrics.OnRequestFinished(final_event);
  const std::string text = registry.Render();
  EXPECT_TRUE(Contains(text, "blossom_requests_total{model_name=\"m\",outcome=\"error\"} 2")) << text;
  EXPECT_TRUE(Contains(
      text, "blossom_requests_total{model_name=\"m\",outcome=\"failed_precondition\"} 2"))
      << text;
  // The call's own label (BlossomService::CallFinished) stays an engine outcome: not counted twice.
  EXPECT_TRUE(IsEngineOutcome(OutcomeLabel(final_event.finish_reason)));
}

TEST(ServerMetricsTest, StepsAndRequestsAreRecorded) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, "m", "9.9");
  StepStats step;
  step.batch_size = 3;
  step.prefill_tokens = 10;
  step.decode_tokens = 2;
  step.duration_seconds = 0.004;
  step.schedule_seconds = 0.125;
  step.sample_seconds = 0.25;
  step.output_seconds = 0.5;
  step.deliver_seconds = 0.0625;
  step.blocks_used = 5;
  step.blocks_total = 20;
  step.running = 3;
  step.waiting = 1;
  step.generated_tokens = 3;
  step.finished_prompt_tokens = 14;
  server_metrics.OnStep(step);
  // Counted per step, not at request end: already visible before any request finished.
  EXPECT_TRUE(Contains(registry.Render(), "blossom_generation_tokens_total{model_name=\"m\"} 3"));
  // Before any drafting the speculative counters exist at 0.
  EXPECT_TRUE(
      Contains(registry.Render(), "blossom_spec_decode_draft_tokens_total{model_name=\"m\"} 0"));
  step.prefill_tokens = 0;
  step.generated_tokens = 5;
  step.finished_prompt_tokens = 0;
  step.draft_tokens = 6;
  step.accepted_draft_tokens = 4;
  server_metrics.OnStep(step);
  EXPECT_TRUE(
      Contains(registry.Render(), "blossom_spec_decode_draft_tokens_total{model_name=\"m\"} 6"));
  EXPECT_TRUE(Contains(registry.Render(),
                       "blossom_spec_decode_accepted_tokens_total{model_name=\"m\"} 4"));

  EngineEvent final_event;
  final_event.finished = true;
  final_event.finish_reason = FinishReason::kLength;
  final_event.usage.prompt_tokens = 7;
  final_event.usage.generated_tokens = 4;
  final_event.max_new_tokens = 16;
  const Clock::time_point t0 = Clock::now();
  final_event.timings.arrival = t0;
  final_event.timings.first_scheduled = t0 + std::chrono::milliseconds(2);
  final_event.timings.first_token = t0 + std::chrono::milliseconds(30);
  final_event.timings.finished = t0 + std::chrono::milliseconds(90);
  // TTFT is observed at the first token, before the request ends.
  server_metrics.OnFirstToken(final_event.timings, /*beam_round=*/false);
  EXPECT_TRUE(Contains(registry.Render(),
                       "blossom_time_to_first_token_seconds_count{model_name=\"m\"} 1"));
  EXPECT_FALSE(Contains(registry.Render(),
                        "blossom_e2e_request_latency_seconds_count{model_name=\"m\"} 1"));
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
       {"blossom_step_duration_seconds_count{model_name=\"m\",phase=\"mixed\"} 1",
        "blossom_step_host_seconds_count{model_name=\"m\",phase=\"mixed\",part=\"output\"} 1",
        "blossom_step_host_seconds_sum{model_name=\"m\",phase=\"decode\",part=\"schedule\"} 0.125",
        "blossom_step_host_seconds_sum{model_name=\"m\",phase=\"mixed\",part=\"sample\"} 0.25",
        "blossom_step_host_seconds_sum{model_name=\"m\",phase=\"mixed\",part=\"deliver\"} 0.0625",
        "blossom_step_duration_seconds_count{model_name=\"m\",phase=\"decode\"} 1",
        "blossom_steps_total{model_name=\"m\",phase=\"prefill\"} 0",
        "blossom_batch_size_count{model_name=\"m\"} 2",
        "blossom_kv_cache_usage_ratio{model_name=\"m\"} 0.25",
        "blossom_num_requests_running{model_name=\"m\"} 3",
        "blossom_time_to_first_token_seconds_count{model_name=\"m\"} 1",
        "blossom_time_to_first_token_seconds_sum{model_name=\"m\"} 0.03",
        "blossom_e2e_request_latency_seconds_count{model_name=\"m\"} 2",
        "blossom_prompt_tokens_total{model_name=\"m\"} 14",
        "blossom_generation_tokens_total{model_name=\"m\"} 8",
        "blossom_requests_total{model_name=\"m\",outcome=\"finished\"} 1",
        "blossom_requests_total{model_name=\"m\",outcome=\"cancelled\"} 1",

        "blossom_requests_total{model_name=\"m\",outcome=\"resource_exhausted\"} 1",
        "blossom_inter_token_latency_seconds_count{model_name=\"m\"} 1",
        "blossom_preemptions_total{model_name=\"m\"} 5",
        "blossom_prefix_cache_queries_total{model_name=\"m\"} 100",
        "blossom_prefix_cache_hits_total{model_name=\"m\"} 40",
        "blossom_prefix_cache_query_tokens_total{model_name=\"m\"} 100",
        "blossom_prefix_cache_hit_tokens_total{model_name=\"m\"} 40",
        "blossom_request_prefill_time_seconds_count{model_name=\"m\"} 1",
        "blossom_request_prefill_time_seconds_sum{model_name=\"m\"} 0.028",
        "blossom_request_decode_time_seconds_sum{model_name=\"m\"} 0.06",
        "blossom_request_max_tokens_count{model_name=\"m\"} 2",
        "blossom_request_max_tokens_sum{model_name=\"m\"} 32"}) {
    EXPECT_TRUE(Contains(text, line)) << line << "\n" << text;
  }
}

TEST(ServerMetricsTest, ABeamSearchIsOneRequestNotOnePerRound) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, "m", "9.9");
  EngineEvent round;
  round.finished = true;
  round.finish_reason = FinishReason::kLength;
  round.beam_round = true;
  round.usage.prompt_tokens = 9;
  round.usage.generated_tokens = 1;
  round.timings.arrival = Clock::now();
  round.timings.first_scheduled = round.timings.first_token = round.timings.arrival;
  for (int i = 0; i < 5; ++i) {
    server_metrics.OnFirstToken(round.timings, /*beam_round=*/true);
    server_metrics.OnRequestFinished(round);
  }
  server_metrics.ObserveBeamSearch(0.5, 9, 12, 8, "finished");
  const std::string text = registry.Render();
  for (const char* line : {"blossom_requests_total{model_name=\"m\",outcome=\"finished\"} 1",
                           "blossom_e2e_request_latency_seconds_count{model_name=\"m\"} 1",
                           "blossom_e2e_request_latency_seconds_sum{model_name=\"m\"} 0.5",
                           "blossom_request_prompt_tokens_sum{model_name=\"m\"} 9",
                           "blossom_prompt_tokens_total{model_name=\"m\"} 9",
                           "blossom_request_generated_tokens_sum{model_name=\"m\"} 12",
                           "blossom_request_max_tokens_count{model_name=\"m\"} 1",
                           "blossom_request_max_tokens_sum{model_name=\"m\"} 8",
                           "blossom_time_to_first_token_seconds_count{model_name=\"m\"} 0"}) {
    EXPECT_TRUE(Contains(text, line)) << line << "\n" << text;
  }
}

// Requests a drain cut (Engine::Shutdown: kAborted) are no failures: an error-rate alert on
// outcome="error" must not see them. The refusal labels stay apart from the engine's outcomes.
TEST(ServerMetricsTest, AbortedRequestsAreNotErrors) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, "m", "9.9");
  EngineEvent final_event;
  final_event.finished = true;
  final_event.finish_reason = FinishReason::kAborted;
  final_event.status = EngineShutdownError("shut down");
  server_metrics.OnRequestFinished(final_event);
  server_metrics.OnRequestFinished(final_event);
  server_metrics.ObserveBeamSearch(0.5, 9, 0, 8, OutcomeLabel(FinishReason::kAborted));
  const std::string text = registry.Render();
  for (const char* line : {"blossom_requests_total{model_name=\"m\",outcome=\"aborted\"} 3",
                           "blossom_requests_total{model_name=\"m\",outcome=\"error\"} 0",
                           "blossom_requests_total{model_name=\"m\",outcome=\"finished\"} 0"}) {
    EXPECT_TRUE(Contains(text, line)) << line << "\n" << text;
  }
  EXPECT_STREQ(OutcomeLabel(FinishReason::kError), "error");
  EXPECT_STREQ(OutcomeLabel(FinishReason::kCancelled), "cancelled");
  EXPECT_STREQ(OutcomeLabel(FinishReason::kStopString), "finished");
  EXPECT_TRUE(IsEngineOutcome("aborted"));
  EXPECT_FALSE(IsEngineOutcome("unavailable"));
}

// What a server exposes (every series with model_name, process metrics, build info) passes
// promtool's lint.
TEST(ServerMetricsTest, ExpositionPassesPromtool) {
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, "bloom-tiny-h4", "0.1.0");
  StepStats step;
  step.generated_tokens = 2;
  server_metrics.OnStep(step);
  const std::string text = registry.Render();
  std::string out;
  const int rc = metrics::RunPromtool(text, &out);
  if (rc == -1) GTEST_SKIP() << "promtool not installed (Debian: apt-get install prometheus)";
  EXPECT_EQ(rc, 0) << out << "\n--- input ---\n" << text;
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace blossom
