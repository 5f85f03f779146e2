#include "benchmarks/serving_stats.h"

#include <cmath>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(ServingStatsTest, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_NEAR(Percentile(v, 90), 3.7, 1e-12);   // rank 2.7
  EXPECT_NEAR(Percentile(v, 99), 3.97, 1e-12);  // rank 2.97
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  const Distribution d = Summarize(v);
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_NEAR(d.std, std::sqrt(1.25), 1e-12);  // population std
  EXPECT_EQ(d.min, 1);
  EXPECT_EQ(d.max, 4);
}

RequestRecord Ok(double send, std::vector<double> tokens, int prompt, int expected) {
  RequestRecord r;
  r.send_s = r.scheduled_s = send;
  r.token_times_s = tokens;
  r.first_token_s = tokens.front();
  r.end_s = tokens.back();
  r.prompt_tokens = prompt;
  r.output_tokens = static_cast<int32_t>(tokens.size());
  r.expected_output_tokens = expected;
  r.success = true;
  return r;
}

std::vector<RequestRecord> Example() {
  RequestRecord failed;
  failed.send_s = 1.5;
  failed.end_s = 1.6;
  failed.error = "grpc UNAVAILABLE: the model is loading";
  return {Ok(0.0, {0.1, 0.3, 0.6}, 10, 3),  // TTFT 100, E2E 600, TPOT 250, ITL 200 300
          Ok(1.0, {1.05, 1.15}, 5, 2),      // TTFT 50, E2E 150, TPOT 100, ITL 100
          failed,
          Ok(2.0, {2.5}, 4, 2)};            // TTFT 500, E2E 500, no TPOT; one token short
}

TEST(ServingStatsTest, HandComputedSummary) {
  const ServingSummary s = SummarizeRequests(Example(), 4.0, Slo{});
  EXPECT_EQ(s.requests, 4);
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.failures.at("grpc UNAVAILABLE"), 1);
  EXPECT_EQ(s.output_length_mismatches, 1);
  EXPECT_EQ(s.total_input_tokens, 19);
  EXPECT_EQ(s.total_output_tokens, 6);
  EXPECT_DOUBLE_EQ(s.request_throughput, 0.75);
  EXPECT_DOUBLE_EQ(s.output_token_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 6.25);
  EXPECT_EQ(s.good_requests, 3);  // no objectives: every completed request is good
  EXPECT_DOUBLE_EQ(s.goodput, 0.75);

  EXPECT_EQ(s.ttft_ms.count, 3);
  EXPECT_NEAR(s.ttft_ms.mean, 650.0 / 3, 1e-9);
  EXPECT_NEAR(s.ttft_ms.median, 100, 1e-9);
  EXPECT_NEAR(s.ttft_ms.p90, 420, 1e-9);  // sorted 50 100 500, rank 1.8
  EXPECT_NEAR(s.e2e_ms.median, 500, 1e-9);
  EXPECT_NEAR(s.e2e_ms.max, 600, 1e-9);
  EXPECT_EQ(s.tpot_ms.count, 2);
  EXPECT_NEAR(s.tpot_ms.mean, 175, 1e-9);
  EXPECT_EQ(s.itl_ms.count, 3);
  EXPECT_NEAR(s.itl_ms.median, 200, 1e-9);
  EXPECT_NEAR(s.itl_ms.p99, 298, 1e-9);  // sorted 100 200 300, rank 1.98
}

// E2E (and so TPOT) end at the last token, as vLLM's benchmark: the final usage message and the
// stream's close after it are not the model's time. Without tokens, the stream's end.
TEST(ServingStatsTest, EndToEndEndsAtTheLastToken) {
  RequestRecord r = Ok(0.0, {0.1, 0.2, 0.3}, 4, 3);
  r.end_s = 0.5;  // [DONE] and the close came 200 ms after the last token
  EXPECT_NEAR(E2eMs(r), 300, 1e-9);
  EXPECT_NEAR(TpotMs(r), 100, 1e-9);
  RequestRecord none;
  none.send_s = 1.0;
  none.end_s = 1.25;
  EXPECT_NEAR(E2eMs(none), 250, 1e-9);
}

TEST(ServingStatsTest, GoodputCountsRequestsMeetingEveryObjective) {
  Slo ttft_only;
  ttft_only.ttft_ms = 200;  // r0, r1 meet it; r3 (500) does not
  EXPECT_EQ(SummarizeRequests(Example(), 4.0, ttft_only).good_requests, 2);
  EXPECT_DOUBLE_EQ(SummarizeRequests(Example(), 4.0, ttft_only).goodput, 0.5);
  Slo both = ttft_only;
  both.tpot_ms = 200;  // r0's TPOT is 250
  EXPECT_EQ(SummarizeRequests(Example(), 4.0, both).good_requests, 1);
  Slo tpot_only;
  tpot_only.tpot_ms = 200;  // r3 has one token: TPOT 0 meets it
  EXPECT_EQ(SummarizeRequests(Example(), 4.0, tpot_only).good_requests, 2);
  Slo e2e;
  e2e.e2e_ms = 500;  // inclusive: r1 (150) and r3 (500)
  EXPECT_EQ(SummarizeRequests(Example(), 4.0, e2e).good_requests, 2);
}

TEST(ServingStatsTest, SuccessWithoutTokensIsAFailure) {
  RequestRecord r;
  r.success = true;
  const ServingSummary s = SummarizeRequests({r}, 1.0, Slo{});
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.failures.at("no token received"), 1);
  EXPECT_EQ(s.ttft_ms.count, 0);
}

}  // namespace
}  // namespace blossom
