// Streams that fail mid-way: the client gets every token and every character produced, then the
// error status, and no message that reads as a normal end. And calls a drain timeout cuts:
// retryable, and no failures.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/pretend_device_runner.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/stream_request.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "server/testing/in_process_server.h"

namespace blossom {
namespace {

class Fixture : public testing::InProcessServer {
 public:
  Fixture()
      : stub_(v1::Blossom::NewStub(
            grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()))) {}
  v1::Blossom::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<v1::Blossom::Stub> stub_;
};

struct Received {
  std::vector<std::string> deltas;  // per message
  int tokens = 0, finals = 0;
  grpc::Status status;
};

Received Stream(Fixture& fixture, const v1::GenerateRequest& request) {
  grpc::ClientContext context;
  auto reader = fixture.stub().GenerateStream(&context, v1::ToStreamRequest(request));
  Received r;
  v1::GenerateStreamResponse message;
  while (reader->Read(&message)) {
    r.deltas.push_back(message.text_delta());
    r.tokens += message.has_token();
    r.finals += message.has_final();
  }
  r.status = reader->Finish();
  return r;
}

v1::GenerateRequest Greedy(int max_new_tokens) {
  v1::GenerateRequest request;
  request.set_text("The server reads");
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  request.mutable_stopping()->set_ignore_eos(true);
  return request;
}

TEST(BlossomServiceFailureTest, HeldBackTextComesBeforeTheErrorWithoutAFinalMessage) {
  // The greedy stream as it is, to find a token whose text ends in a character we can make the
  // stop rules hold back.
  std::vector<std::string> deltas;
  {
    Fixture fixture;
    fixture.Load();
    const Received normal = Stream(fixture, Greedy(12));
    ASSERT_TRUE(normal.status.ok()) << normal.status.error_message();
    ASSERT_EQ(normal.tokens, 12);
    deltas = normal.deltas;
  }
  int j = -1;
  for (int i = 2; i < 10 && j < 0; ++i) {
    if (!deltas[i].empty() && static_cast<unsigned char>(deltas[i].back()) < 0x80) j = i;
  }
  ASSERT_GE(j, 0) << "no token with ASCII text among 2..9";
  std::string before;  // the text of tokens 0..j
  for (int i = 0; i <= j; ++i) before += deltas[i];
  // A stop string that starts with token j's last character and can never complete: after
  // token j that character is held back, and the step for token j + 1 fails.
  v1::GenerateRequest request = Greedy(12);
  request.mutable_stopping()->add_stop(std::string(1, deltas[j].back()) + "\x01\x02");
  Fixture fixture;
  fixture.Load([j](ModelRunner* model) {
    // Step 1 is the prefill (token 0); step i + 1 computes token i.
    return std::make_unique<FailingStepRunner>(model, j + 2);
  });
  const Received failed = Stream(fixture, request);
  EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(failed.status.error_message().find("a peer died"), std::string::npos)
      << failed.status.error_message();
  EXPECT_EQ(failed.tokens, j + 1);
  EXPECT_EQ(failed.finals, 0) << "a final message would read as a normal end";
  std::string text;
  for (const std::string& d : failed.deltas) text += d;
  EXPECT_EQ(text, before) << "the held-back character must still arrive";
  ASSERT_FALSE(failed.deltas.empty());
  EXPECT_EQ(failed.deltas.back(), std::string(1, deltas[j].back()));
  EXPECT_TRUE(fixture.WaitForIdle());
}

TEST(BlossomServiceFailureTest, AFailureWithNothingHeldBackEndsWithTheStatusAlone) {
  Fixture fixture;
  fixture.Load([](ModelRunner* model) { return std::make_unique<FailingStepRunner>(model, 4); });
  const Received failed = Stream(fixture, Greedy(12));
  EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(failed.tokens, 3);
  EXPECT_EQ(failed.finals, 0);
  EXPECT_TRUE(fixture.WaitForIdle());
}

// A step failure that leaves the runner unusable: the request in it fails, the service turns
// NOT_SERVING, and later generations are refused at once with UNAVAILABLE (MODEL_FAILED).
TEST(BlossomServiceFailureTest, AFailureForGoodStopsServing) {
  Fixture fixture;
  fixture.Load([](ModelRunner* model) {
    return std::make_unique<FailingStepRunner>(model, 4, /*fatal=*/true);
  });
  const Received failed = Stream(fixture, Greedy(12));
  EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(failed.tokens, 3);
  EXPECT_TRUE(fixture.WaitForIdle());
  // The engine reports the failure after the step that ended the stream.
  for (int i = 0; i < 200 && fixture.not_serving_calls() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(fixture.not_serving_calls(), 1);
  EXPECT_EQ(fixture.service().state(), BlossomService::State::kFailed);
  for (int call = 0; call < 2; ++call) {
    if (call == 1) {
      // A SIGTERM's drain does not hide the failure (/live keeps asking for the restart).
      fixture.service().StartDraining();
      EXPECT_EQ(fixture.service().state(), BlossomService::State::kFailed);
    }
    const Received refused = Stream(fixture, Greedy(4));
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(refused.status.error_message().find("must be restarted"), std::string::npos)
        << refused.status.error_message();
    EXPECT_NE(refused.status.error_message().find("a peer died"), std::string::npos);
    EXPECT_EQ(refused.tokens, 0);
  }
}

// A step failure the runner survives: the service keeps serving.
TEST(BlossomServiceFailureTest, AFailureTheRunnerSurvivesKeepsServing) {
  Fixture fixture;
  fixture.Load([](ModelRunner* model) { return std::make_unique<FailingStepRunner>(model, 4); });
  EXPECT_EQ(Stream(fixture, Greedy(12)).status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(fixture.WaitForIdle());
  EXPECT_EQ(fixture.not_serving_calls(), 0);
  EXPECT_EQ(fixture.service().state(), BlossomService::State::kServing);
}

bool WaitFor(const std::function<bool()>& condition) {
  for (int i = 0; i < 1000 && !condition(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// A drain that runs out (blossom-server: StartDraining, then Engine::Shutdown) cuts the calls
// still open. Each ends UNAVAILABLE with SHUTTING_DOWN and a retry delay, as a call refused
// while draining (another replica can run it; the gateway's unary 503 gets Retry-After), a
// stream after the tokens it had and without a final message, and each counts as outcome
// "aborted": error-rate alerts on "error" must not page for every rollout.
TEST(BlossomServiceFailureTest, CallsTheShutdownCutsAreRetryableAndNoErrors) {
  Fixture fixture;
  HoldingRunner* holding = nullptr;
  fixture.Load([&holding](ModelRunner* model) {
    auto runner = std::make_unique<HoldingRunner>(model, /*free_steps=*/3);
    holding = runner.get();
    return runner;
  });
  ASSERT_NE(holding, nullptr);
  std::atomic<int> streamed{0};
  Received stream;
  std::thread streamer([&] {
    grpc::ClientContext context;
    auto reader = fixture.stub().GenerateStream(&context, v1::ToStreamRequest(Greedy(40)));
    v1::GenerateStreamResponse message;
    while (reader->Read(&message)) {
      stream.tokens += message.has_token();
      stream.finals += message.has_final();
      streamed.fetch_add(1);
    }
    stream.status = reader->Finish();
  });
  // The stream alone has the three free steps' tokens; what comes next only waits in the engine.
  ASSERT_TRUE(WaitFor([&] { return streamed.load() == 3; }));
  grpc::Status unary_status;
  std::thread unary([&] {
    grpc::ClientContext context;
    v1::GenerateResponse response;
    unary_status = fixture.stub().Generate(&context, Greedy(40), &response);
  });
  ASSERT_TRUE(WaitFor([&] { return fixture.engine().num_unfinished() == 2; }));
  grpc::Status beam_status;
  std::thread beam([&] {
    grpc::ClientContext context;
    v1::BeamSearchRequest request;
    request.set_text("The server reads");
    request.set_beam_width(2);
    request.mutable_stopping()->set_max_new_tokens(8);
    v1::BeamSearchResponse response;
    beam_status = fixture.stub().BeamSearch(&context, request, &response);
  });
  ASSERT_TRUE(WaitFor([&] { return fixture.engine().num_unfinished() >= 3; }));

  fixture.service().StartDraining();
  std::thread shutdown([&] { fixture.engine().Shutdown(); });
  // Shutdown ends every request before it waits for the step held here.
  ASSERT_TRUE(WaitFor([&] {
    const SchedulerStats stats = fixture.engine().scheduler_stats();
    return stats.running == 0 && stats.waiting == 0;
  }));
  holding->Release();
  shutdown.join();
  streamer.join();
  unary.join();
  beam.join();

  EXPECT_EQ(stream.tokens, 3);
  EXPECT_EQ(stream.finals, 0) << "a final message would read as a normal end";
  for (const grpc::Status& status : {stream.status, unary_status, beam_status}) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    const StatusDetails details = DetailsOf(FromGrpcStatus(status));
    EXPECT_EQ(details.reason, error_reason::kShuttingDown) << status.error_message();
    EXPECT_EQ(details.retry_delay, kUnavailableRetryDelay) << status.error_message();
  }
  const std::string metrics = fixture.registry().Render();
  for (const char* line :
       {"blossom_requests_total{model_name=\"bloom-tiny-h4\",outcome=\"aborted\"} 3",
        "blossom_requests_total{model_name=\"bloom-tiny-h4\",outcome=\"error\"} 0"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << "\n" << metrics;
  }
}

}  // namespace
}  // namespace blossom
