// blossom-server's signals, on the real binary: a second SIGTERM during the drain ends it at once
// (as a second Ctrl-C in uvicorn and vLLM), cutting the stream still open as the drain timeout
// would (UNAVAILABLE, SHUTTING_DOWN, a retry delay), instead of waiting out --drain_timeout.
//
// The server runs in the background (testing::BackgroundProcess) so that the test can signal it
// twice while it serves a stream; testing::RunBinary sends at most one signal, at its timeout.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "proto/blossom/v1/stream_request.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "server/testing/background_process.h"
#include "server/testing/run_binary.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

using Clock = std::chrono::steady_clock;

// The drain timeout the server gets: far longer than the test may take, so only the second
// signal can end the drain in time.
constexpr int kDrainTimeoutSeconds = 300;
// How soon after the second signal the server must be gone.
constexpr int kPromptExitSeconds = 20;

// What a stream received, filled by its reading thread.
struct StreamResult {
  std::atomic<int> tokens{0};
  int finals = 0;
  grpc::Status status;
};

TEST(BlossomServerSignalTest, ASecondSigtermEndsTheDrainAtOnce) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string log_path = std::string(tmp ? tmp : "/tmp") + "/blossom-server.log";
  // --max_total_tokens far above the default, so that the stream below cannot end by itself
  // during the test (the tiny model slows down as its context grows).
  testing::BackgroundProcess server(
      {testing::RunfilePath("server/blossom-server"), "--model",
       FixturePath("models/bloom-tiny-h4"), "--host", "127.0.0.1", "--port", "0",
       "--metrics_port", "-1", "--threads", "1", "--max_total_tokens", "65536",
       "--drain_timeout", std::to_string(kDrainTimeoutSeconds)},
      log_path);
  ASSERT_TRUE(server.started());
  ASSERT_TRUE(server.WaitForLog("] serving ", absl::Seconds(120))) << server.Log();
  const std::string log = server.Log();
  const size_t at = log.find("grpc_port=");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string address = "127.0.0.1:" + std::to_string(std::atoi(log.c_str() + at + 10));

  auto stub = v1::Blossom::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::GenerateRequest request;
  request.set_text("The server reads");
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stopping()->set_max_new_tokens(60000);
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(240));
  StreamResult stream;
  auto reader = stub->GenerateStream(&context, v1::ToStreamRequest(request));
  std::thread consumer([&] {
    v1::GenerateStreamResponse message;
    while (reader->Read(&message)) {
      stream.tokens.fetch_add(message.has_token());
      stream.finals += message.has_final();
    }
    stream.status = reader->Finish();
  });
  // On a failed assertion: end the call, so that the consumer's Read returns.
  struct Joiner {
    grpc::ClientContext& context;
    std::thread& thread;
    ~Joiner() {
      if (!thread.joinable()) return;
      context.TryCancel();
      thread.join();
    }
  } joiner{context, consumer};
  for (int i = 0; i < 3000 && stream.tokens.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(stream.tokens.load(), 0) << server.Log();

  server.Signal(SIGTERM);
  ASSERT_TRUE(server.WaitForLog("received SIGTERM: draining", absl::Seconds(10)))
      << server.Log();
  // Draining, not exiting: the stream keeps the drain going.
  EXPECT_FALSE(server.WaitForExit(absl::Milliseconds(300)).has_value()) << server.Log();

  const Clock::time_point second = Clock::now();
  server.Signal(SIGTERM);
  const std::optional<int> status = server.WaitForExit(absl::Seconds(kPromptExitSeconds));
  ASSERT_TRUE(status.has_value()) << "still draining " << kPromptExitSeconds
                                  << " s after the second SIGTERM\n"
                                  << server.Log();
  EXPECT_LT(Clock::now() - second, std::chrono::seconds(kPromptExitSeconds));
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << server.Log();
  consumer.join();

  // The stream was cut as by the drain timeout: aborted, retryable elsewhere, no final message.
  EXPECT_EQ(stream.finals, 0);
  EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << stream.status.error_message();
  const StatusDetails details = DetailsOf(FromGrpcStatus(stream.status));
  EXPECT_EQ(details.reason, error_reason::kShuttingDown) << stream.status.error_message();
  EXPECT_TRUE(details.retry_delay.has_value()) << stream.status.error_message();
  const std::string final_log = server.Log();
  for (const char* line : {"received SIGTERM again: ending the drain now",
                           "a second signal: aborting 1 generations", "finish_reason=abort",
                           "stopped (1 generations were cut by a second signal)"}) {
    EXPECT_NE(final_log.find(line), std::string::npos) << line << "\n" << final_log;
  }
}

}  // namespace
}  // namespace blossom
