// The gRPC service over loopback with the CPU backend and the 4-head fixture model: results,
// streaming, cancellation and deadlines freeing KV blocks, admission (loading, draining, auth,
// queue full) and log lines. What requests ask for and get back (validation, prompt logprobs,
// special tokens, limits, tokenize) is blossom_service_request_test's.
#include "server/blossom_service.h"

#include <atomic>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/blossom/v1/stream_request.h"
#include "server/blossom_service_test_util.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

using testing::Greedy;
using testing::ServiceFixture;

TEST(BlossomServiceTest, UnavailableWhileLoading) {
  ServiceFixture fixture;
  grpc::ClientContext context;
  v1::GenerateResponse response;
  grpc::Status status = fixture.stub().Generate(&context, Greedy("Hello", 4), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(status.error_message().find("loading"), std::string::npos) << status.error_message();
  // grpc-status-details-bin: a machine reason and when to retry.
  const StatusDetails details = DetailsOf(FromGrpcStatus(status));
  EXPECT_EQ(details.reason, "MODEL_LOADING");
  EXPECT_EQ(details.retry_delay, kLoadingRetryDelay);
}

TEST(BlossomServiceTest, UnaryAndStreamAgreeAndReportUsage) {
  ServiceFixture fixture;
  fixture.Load();
  grpc::ClientContext unary_context;
  v1::GenerateResponse unary;
  v1::GenerateRequest request = Greedy("The server reads", 12);
  request.set_request_id("abc");
  request.mutable_sampling()->set_logprobs(2);
  ASSERT_TRUE(fixture.stub().Generate(&unary_context, request, &unary).ok());
  EXPECT_EQ(unary.tokens_size(), 12);
  EXPECT_EQ(unary.final().usage().generated_tokens(), 12);
  EXPECT_EQ(unary.final().usage().prompt_tokens(),
            static_cast<int>(fixture.tokenizer().Encode("The server reads")->size()));
  EXPECT_EQ(unary.final().finish_reason(), v1::FINISH_REASON_LENGTH);
  // A seeded sampled request reports its seed; the same seed reproduces the text.
  v1::GenerateRequest sampled = Greedy("The server reads", 6);
  sampled.mutable_sampling()->set_temperature(0.8f);
  sampled.mutable_sampling()->set_seed(77);
  v1::GenerateResponse first, second;
  grpc::ClientContext c1, c2;
  ASSERT_TRUE(fixture.stub().Generate(&c1, sampled, &first).ok());
  ASSERT_TRUE(fixture.stub().Generate(&c2, sampled, &second).ok());
  EXPECT_EQ(first.final().seed(), 77u);
  EXPECT_EQ(first.text(), second.text());
  EXPECT_NE(unary.final().request_id().find("/abc"), std::string::npos);
  EXPECT_GT(unary.final().timings().total_seconds(), 0.0);
  EXPECT_GE(unary.final().timings().total_seconds(),
            unary.final().timings().time_to_first_token_seconds());
  ASSERT_TRUE(unary.tokens(0).has_logprob());
  EXPECT_LE(unary.tokens(0).logprob(), 0.0f);
  EXPECT_EQ(unary.tokens(0).top_logprobs_size(), 2);
  std::vector<int32_t> ids;
  for (const v1::Token& t : unary.tokens()) ids.push_back(t.id());
  EXPECT_EQ(unary.text(), fixture.tokenizer().Decode(ids));

  grpc::ClientContext stream_context;
  auto reader = fixture.stub().GenerateStream(&stream_context, v1::ToStreamRequest(request));
  v1::GenerateStreamResponse message;
  std::string text;
  int token_messages = 0, finals = 0;
  while (reader->Read(&message)) {
    text += message.text_delta();
    token_messages += message.has_token();
    if (message.has_final()) {
      ++finals;
      EXPECT_EQ(message.final().usage().generated_tokens(), 12);
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, unary.text());  // greedy: identical
  EXPECT_EQ(unary.final().prompt_token_ids_size(), 0);  // not asked for
  EXPECT_EQ(token_messages, 12);
  EXPECT_EQ(finals, 1);
  EXPECT_TRUE(fixture.WaitForIdle());
  const std::string rendered = fixture.registry().Render();
  for (const char* line :
       {"blossom_time_to_first_token_seconds_count{model_name=\"bloom-tiny-h4\"} 4",
        "blossom_generation_tokens_total{model_name=\"bloom-tiny-h4\"} 36"}) {
    EXPECT_NE(rendered.find(line), std::string::npos) << line << "\n" << rendered;
  }
}

// Accepted speculative drafts arrive in the step of the token before them: one inter-token
// latency per step, not a zero per extra token.
TEST(BlossomServiceTest, InterTokenLatencyCountsStepsNotDraftTokens) {
  EngineConfig engine_config;
  engine_config.speculative.num_speculative_tokens = 4;
  engine_config.speculative.lookup_min = 1;
  ServiceFixture fixture({}, engine_config);
  fixture.Load();
  grpc::ClientContext context;
  auto reader = fixture.stub().GenerateStream(
      &context, v1::ToStreamRequest(Greedy("the the the the the the the the", 24)));
  v1::GenerateStreamResponse message;
  int tokens = 0;
  while (reader->Read(&message)) tokens += message.has_token();
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(tokens, 24);
  EXPECT_TRUE(fixture.WaitForIdle());
  const std::string rendered = fixture.registry().Render();
  auto value = [&](const std::string& series) -> int64_t {
    const std::string key = series + "{model_name=\"bloom-tiny-h4\"} ";
    const size_t at = rendered.find(key);
    if (at == std::string::npos) return -1;
    return std::stoll(rendered.substr(at + key.size()));
  };
  const int64_t accepted = value("blossom_spec_decode_accepted_tokens_total");
  ASSERT_GT(accepted, 0) << "no draft was accepted: the test needs a prompt the model repeats\n"
                         << rendered;
  EXPECT_EQ(value("blossom_inter_token_latency_seconds_count"), tokens - 1 - accepted)
      << rendered;
}

TEST(BlossomServiceTest, ClientCancelFreesTheRequest) {
  ServiceFixture fixture;
  fixture.Load();
  grpc::ClientContext context;
  auto reader = fixture.stub().GenerateStream(&context, v1::ToStreamRequest(Greedy("Once upon a time", 1000)));
  v1::GenerateStreamResponse message;
  ASSERT_TRUE(reader->Read(&message));
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(fixture.WaitForIdle()) << "the engine still holds the cancelled request";
}

TEST(BlossomServiceTest, DeadlineExceededCancelsInTheEngine) {
  ServiceFixture fixture;
  fixture.Load();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  v1::GenerateResponse response;
  grpc::Status status = fixture.stub().Generate(&context, Greedy("Once upon a time", 1900),
                                                &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(fixture.WaitForIdle());
}

TEST(BlossomServiceTest, FullQueueIsRefusedFastAndOthersFinish) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 1;
  config.scheduler.max_waiting_requests = 1;
  ServiceFixture fixture({}, config);
  fixture.Load();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, exhausted{0}, other{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext context;
      v1::GenerateResponse response;
      grpc::Status status =
          fixture.stub().Generate(&context, Greedy("Request " + std::to_string(i), 300), &response);
      if (status.ok() && response.final().usage().generated_tokens() == 300) {
        ++ok;
      } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
                 DetailsOf(FromGrpcStatus(status)).reason == "QUEUE_FULL" &&
                 DetailsOf(FromGrpcStatus(status)).retry_delay == kQueueFullRetryDelay) {
        ++exhausted;
      } else {
        ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(exhausted.load(), 1);
  EXPECT_GE(ok.load(), 1);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load() + exhausted.load(), 4);
}

// The queue's capacity reaches the request checks: a group it could never hold is refused for
// good (no RetryInfo), one it can hold is served.
TEST(BlossomServiceTest, GroupLargerThanTheQueueIsOutOfRange) {
  EngineConfig config;
  config.scheduler.max_waiting_requests = 2;
  ServiceFixture fixture({}, config);
  fixture.Load();
  v1::GenerateRequest request = Greedy("Grouped", 2);
  request.set_group_size(3);
  grpc::ClientContext refused_context;
  v1::GenerateResponse response;
  grpc::Status status = fixture.stub().Generate(&refused_context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  const StatusDetails details = DetailsOf(FromGrpcStatus(status));
  EXPECT_EQ(details.reason, "GROUP_TOO_LARGE");
  EXPECT_EQ(details.field, "group_size");
  EXPECT_FALSE(details.retry_delay.has_value());
  request.set_group_size(2);
  grpc::ClientContext served_context;
  status = fixture.stub().Generate(&served_context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.final().usage().generated_tokens(), 2);
}

TEST(BlossomServiceTest, DrainingRefusesNewGenerationsButFinishesOldOnes) {
  ServiceFixture fixture;
  fixture.Load();
  grpc::ClientContext context;
  auto reader = fixture.stub().GenerateStream(&context, v1::ToStreamRequest(Greedy("Drain me", 200)));
  v1::GenerateStreamResponse message;
  ASSERT_TRUE(reader->Read(&message));
  fixture.service().StartDraining();
  grpc::ClientContext refused_context;
  v1::GenerateResponse refused;
  EXPECT_EQ(fixture.stub().Generate(&refused_context, Greedy("late", 4), &refused).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  int tokens = message.has_token();
  int generated = -1;
  while (reader->Read(&message)) {
    tokens += message.has_token();
    if (message.has_final()) generated = message.final().usage().generated_tokens();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 200);
  EXPECT_EQ(generated, 200);
  // Tokenize and model info keep working while draining.
  grpc::ClientContext tokenize_context;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("still here");
  v1::TokenizeResponse tokens_response;
  EXPECT_TRUE(fixture.stub().Tokenize(&tokenize_context, tokenize, &tokens_response).ok());
}

TEST(BlossomServiceTest, ApiKeysAreRequired) {
  ServiceOptions options;
  options.api_keys = auth::ApiKeys({"secret-one", "secret-two"});
  ServiceFixture fixture(options);
  fixture.Load();
  auto call = [&](const std::string& header) {
    grpc::ClientContext context;
    if (!header.empty()) context.AddMetadata("authorization", header);
    v1::GetModelInfoRequest request;
    v1::ModelInfo info;
    return fixture.stub().GetModelInfo(&context, request, &info).error_code();
  };
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer secret-on"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("secret-two"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer secret-two"), grpc::StatusCode::OK);
  // RFC 9110: the scheme is case-insensitive, as in the gateway (issue 14, defect 4).
  EXPECT_EQ(call("bearer secret-two"), grpc::StatusCode::OK);
  EXPECT_EQ(call("BEARER  secret-one"), grpc::StatusCode::OK);
}

// Issue 14: the model name was logged raw: a "\n" forged a separate [critical] line and a
// 1 MB name made a 1 MB log line.
TEST(BlossomServiceTest, LogLinesEscapeAndCutClientInput) {
  std::ostringstream log;
  auto logger = std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  {
    ServiceFixture fixture;
    fixture.Load();
    for (const std::string& model :
         {std::string("evil\n[critical] forged"), std::string(200, 'n') + std::string(1 << 20, '\n')}) {
      v1::GenerateRequest request = Greedy("Hello", 2);
      request.set_model(model);
      grpc::ClientContext context;
      v1::GenerateResponse response;
      EXPECT_FALSE(fixture.stub().Generate(&context, request, &response).ok());
    }
  }
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  EXPECT_EQ(text.find("\n[critical]"), std::string::npos) << text;
  EXPECT_NE(text.find("evil\\x0a[critical] forged"), std::string::npos) << text;
  for (absl::string_view line : absl::StrSplit(text, '\n')) EXPECT_LT(line.size(), 2000u);
}

TEST(BlossomServiceTest, ManyConcurrentStreamsWithDisconnectsLeaveNothingBehind) {
  ServiceFixture fixture;
  fixture.Load();
  constexpr int kStreams = 64;
  std::vector<std::thread> threads;
  std::atomic<int> exact{0}, cancelled{0};
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext context;
      const int want = 5 + i % 7;
      auto reader = fixture.stub().GenerateStream(
          &context, v1::ToStreamRequest(Greedy("Stream " + std::to_string(i), want)));
      v1::GenerateStreamResponse message;
      int tokens = 0;
      while (reader->Read(&message)) {
        tokens += message.has_token();
        if (i % 10 == 3 && tokens == 2) context.TryCancel();
      }
      grpc::Status status = reader->Finish();
      if (i % 10 == 3) {
        cancelled += status.error_code() == grpc::StatusCode::CANCELLED;
      } else {
        exact += status.ok() && tokens == want;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(exact.load(), kStreams - 7);
  EXPECT_EQ(cancelled.load(), 7);
  EXPECT_TRUE(fixture.WaitForIdle());
}

}  // namespace
}  // namespace blossom
