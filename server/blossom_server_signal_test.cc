// blossom-server's signals, on the real binary: a second SIGTERM during the drain ends it at once
// (as a second Ctrl-C in uvicorn and vLLM), cutting the stream still open as the drain timeout
// would (UNAVAILABLE, SHUTTING_DOWN, a retry delay), instead of waiting out --drain_timeout.
//
// The server runs as a child process (posix_spawn) so that the test can signal it twice while
// it serves a stream; testing::RunBinary sends at most one signal, at its timeout.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "proto/blossom/v1/stream_request.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "server/testing/run_binary.h"
#include "tests/util/fixture_path.h"

extern char** environ;

namespace blossom {
namespace {

using Clock = std::chrono::steady_clock;

// The drain timeout the server gets: far longer than the test may take, so only the second
// signal can end the drain in time.
constexpr int kDrainTimeoutSeconds = 300;
// How soon after the second signal the server must be gone.
constexpr auto kPromptExit = std::chrono::seconds(20);

// A child process with its stdout and stderr in a file; SIGKILLed and reaped if the test ends
// while it still runs.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path)
      : log_path_(log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    // As a process started from a shell: no signal blocked or ignored (gRPC's threads in this
    // test may have changed that, and a child inherits both).
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, &attr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }

  bool started() const { return pid_ > 0; }
  void Signal(int number) const { kill(pid_, number); }
  std::string Log() const { return ReadFileOrEmpty(log_path_); }

  // Polls the log until it contains `needle`.
  bool WaitForLog(const std::string& needle, std::chrono::seconds timeout) const {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (Log().find(needle) == std::string::npos) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  // The wait status once the process ended within `timeout`, else nullopt (still running).
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (true) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return status;
      }
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  const std::string log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

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
  ChildProcess server(
      {testing::RunfilePath("server/blossom-server"), "--model",
       FixturePath("models/bloom-tiny-h4"), "--host", "127.0.0.1", "--port", "0",
       "--metrics_port", "-1", "--threads", "1", "--max_total_tokens", "65536",
       "--drain_timeout", std::to_string(kDrainTimeoutSeconds)},
      log_path);
  ASSERT_TRUE(server.started());
  ASSERT_TRUE(server.WaitForLog("] serving ", std::chrono::seconds(120))) << server.Log();
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
  ASSERT_TRUE(server.WaitForLog("received SIGTERM: draining", std::chrono::seconds(10)))
      << server.Log();
  // Draining, not exiting: the stream keeps the drain going.
  EXPECT_FALSE(server.WaitForExit(std::chrono::milliseconds(300)).has_value()) << server.Log();

  const Clock::time_point second = Clock::now();
  server.Signal(SIGTERM);
  const std::optional<int> status = server.WaitForExit(kPromptExit);
  ASSERT_TRUE(status.has_value()) << "still draining " << kPromptExit.count()
                                  << " s after the second SIGTERM\n"
                                  << server.Log();
  EXPECT_LT(Clock::now() - second, kPromptExit);
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
