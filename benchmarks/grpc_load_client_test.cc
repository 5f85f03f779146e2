// The gRPC load client against the real service (BlossomService + Engine + ModelRunner on the
// 4-head fixture model, CPU) over loopback, driven by the load runner with Poisson arrivals.
#include "benchmarks/grpc_load_client.h"

#include "benchmarks/arrivals.h"
#include "server/testing/in_process_server.h"
#include "benchmarks/load_runner.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using testing::InProcessServer;

TEST(GrpcLoadClientTest, FiftyPoissonRequestsAllSucceedWithExactTokenCounts) {
  InProcessServer server;
  server.Load();
  GrpcLoadClientOptions options;
  options.address = server.address();
  GrpcLoadClient client(options);

  auto tokenized = client.Tokenize("The quick brown fox jumps over the lazy dog again and again");
  ASSERT_TRUE(tokenized.ok()) << tokenized.status();
  ASSERT_GE(tokenized->ids.size(), 8u);
  ASSERT_EQ(tokenized->spans.size(), tokenized->ids.size());

  std::vector<LoadRequest> requests(50);
  for (int i = 0; i < 50; ++i) {
    const int prompt_len = 2 + i % 6;
    if (i % 2 == 0) {  // half as token ids, half as text
      requests[i].token_ids.assign(tokenized->ids.begin(), tokenized->ids.begin() + prompt_len);
    } else {
      requests[i].text = "The quick brown fox";
    }
    requests[i].prompt_tokens = prompt_len;
    requests[i].max_new_tokens = 3 + i % 5;
  }
  ArrivalOptions arrivals;
  arrivals.request_rate = 200;
  arrivals.seed = 1;
  auto schedule = ArrivalSchedule(arrivals, 50);
  ASSERT_TRUE(schedule.ok());
  LoadRunResult result = RunLoad(client, requests, *schedule, 8);

  ASSERT_EQ(result.records.size(), 50u);
  const size_t text_prompt_tokens = server.tokenizer().Encode("The quick brown fox")->size();
  for (int i = 0; i < 50; ++i) {
    const RequestRecord& r = result.records[i];
    ASSERT_TRUE(r.success) << i << ": " << r.error;
    EXPECT_EQ(r.output_tokens, 3 + i % 5) << i;
    EXPECT_EQ(static_cast<int>(r.token_times_s.size()), 3 + i % 5) << i;
    EXPECT_EQ(r.prompt_tokens, i % 2 == 0 ? 2 + i % 6 : static_cast<int>(text_prompt_tokens));
    EXPECT_GE(r.send_s, r.scheduled_s);
    EXPECT_GE(r.first_token_s, r.send_s);
    EXPECT_GE(r.end_s, r.token_times_s.back());
    for (size_t t = 1; t < r.token_times_s.size(); ++t) {
      EXPECT_GE(r.token_times_s[t], r.token_times_s[t - 1]);
    }
  }
  const ServingSummary s = SummarizeRequests(result.records, result.duration_s, Slo{});
  EXPECT_EQ(s.completed, 50);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.output_length_mismatches, 0);
  for (const Distribution* d : {&s.ttft_ms, &s.tpot_ms, &s.itl_ms, &s.e2e_ms}) {
    EXPECT_GT(d->count, 0);
    EXPECT_LE(d->min, d->median);
    EXPECT_LE(d->median, d->p90);
    EXPECT_LE(d->p90, d->p99);
    EXPECT_LE(d->p99, d->max);
  }
  EXPECT_LE(s.ttft_ms.median, s.e2e_ms.median);
  EXPECT_GT(s.output_token_throughput, 0);
}

TEST(GrpcLoadClientTest, ErrorsAreRecordedWithTheirStatus) {
  InProcessServer server;  // never loaded: every generation is UNAVAILABLE
  GrpcLoadClientOptions options;
  options.address = server.address();
  GrpcLoadClient client(options);
  std::vector<LoadRequest> requests(3);
  for (LoadRequest& r : requests) r.text = "hi";
  LoadRunResult result = RunLoad(client, requests, {0, 0, 0}, 0);
  for (const RequestRecord& r : result.records) {
    EXPECT_FALSE(r.success);
    EXPECT_EQ(r.error.rfind("grpc UNAVAILABLE: ", 0), 0u) << r.error;
  }
  EXPECT_EQ(SummarizeRequests(result.records, result.duration_s, Slo{}).failures.at(
                "grpc UNAVAILABLE"), 3);
  EXPECT_FALSE(client.Tokenize("hi").ok());
}

// The server's code reaches prompt building, which halves its pieces on OUT_OF_RANGE.
TEST(GrpcLoadClientTest, TokenizeKeepsTheServersCode) {
  InProcessServer server;
  server.Load();
  GrpcLoadClientOptions options;
  options.address = server.address();
  GrpcLoadClient client(options);
  std::string text;  // 70,000 tokens: past the server's tokenize limit (65,536)
  for (int i = 0; i < 70000; ++i) text += " a";
  auto too_long = client.Tokenize(text);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kOutOfRange) << too_long.status();
}

TEST(GrpcLoadClientTest, TargetParsing) {
  EXPECT_EQ(*GrpcAddressFromTarget("grpc://127.0.0.1:8033"), "127.0.0.1:8033");
  EXPECT_EQ(*GrpcAddressFromTarget("grpc://localhost:1/"), "localhost:1");
  EXPECT_FALSE(GrpcAddressFromTarget("http://127.0.0.1:8080").ok());
  EXPECT_FALSE(GrpcAddressFromTarget("grpc://").ok());
}

}  // namespace
}  // namespace blossom
