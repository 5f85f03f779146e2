// blossom-gateway's stop signals, run as a binary against an in-process fake backend
// (gateway_test_util.h): the first SIGTERM drains (new requests get 503 with Retry-After and
// "Connection: close"); at --drain-timeout every open stream ends in its API's error event
// rather than being cut off; a second signal ends the drain at once, the same way.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clients/gateway/gateway.h"
#include "clients/gateway/gateway_test_util.h"
#include "clients/gateway/json_fields.h"
#include "gtest/gtest.h"
#include "server/http/test_client.h"
#include "server/testing/run_binary.h"

namespace blossom::gateway {
namespace {

using ::blossom::testing::RunBinary;
using ::blossom::testing::RunfilePath;
using ::blossom::testing::RunOptions;
using ::blossom::testing::RunResult;
using testing::Client;
using testing::GatewayTest;
using testing::OpenStream;
using testing::RestOfStream;
using testing::UnusedLoopbackPort;

// The pid of this process's child named `name` (RunBinary spawns it directly), or 0.
pid_t ChildNamed(const std::string& name) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (dirent* entry = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    // "pid (comm) state ppid ...": comm may hold spaces, so split at the last ')'.
    const size_t open = line.find('('), shut = line.rfind(')');
    if (open == std::string::npos || shut == std::string::npos || shut < open) continue;
    const std::string comm = line.substr(open + 1, shut - open - 1);
    std::istringstream rest(line.substr(shut + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == getpid() && comm == name.substr(0, 15)) found = pid;
  }
  closedir(proc);
  return found;
}

class GatewaySignalTest : public GatewayTest {
 protected:
  // Runs blossom-gateway against the fake backend with `flags` until it is ready (/health 200).
  // The port is picked free and then given to the gateway, so another process may take it in
  // between: a gateway that exits at start (it could not bind) is started again on another.
  void Launch(const std::vector<std::string>& flags) {
    int health = 0;
    for (int attempt = 0; attempt < 3 && health != 200; ++attempt) {
      if (runner_.joinable()) runner_.join();
      port_ = UnusedLoopbackPort();
      std::vector<std::string> argv = {RunfilePath("clients/gateway/blossom-gateway"),
                                       absl::StrCat("--port=", port_),
                                       absl::StrCat("--backend=127.0.0.1:", grpc_port_)};
      argv.insert(argv.end(), flags.begin(), flags.end());
      exited_ = false;
      runner_ = std::thread([this, argv] {
        RunOptions options;
        options.timeout = absl::Seconds(30);  // a hang fails with this rather than Bazel's
        result_ = RunBinary(argv, options);
        exited_ = true;
      });
      for (int i = 0; i < 400 && health != 200 && !exited_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        health = Get("/health").status;
      }
      if (!exited_) break;  // running but not ready: no other port would help
    }
    ASSERT_EQ(health, 200) << "the gateway did not start: "
                           << (exited_ ? result_.output : "(still running)");
    pid_ = ChildNamed("blossom-gateway");
    ASSERT_GT(pid_, 0);
  }

  // Waits for the gateway to end; how long that took from `since`.
  absl::Duration Exited(absl::Time since) {
    if (runner_.joinable()) runner_.join();
    return absl::Now() - since;
  }

  void TearDown() override {
    if (runner_.joinable()) {
      if (pid_ > 0) kill(pid_, SIGKILL);
      runner_.join();
    }
    GatewayTest::TearDown();
  }

  Client::Reply Get(const std::string& path) {
    Client client(port_);
    Client::Reply reply;
    if (!client.Send(absl::StrCat("GET ", path, " HTTP/1.1\r\n\r\n")) || !client.ReadReply(&reply)) {
      reply.status = 0;
    }
    return reply;
  }

  // After the first signal: /v1/models answers 503 (bounded wait); that answer.
  Client::Reply DrainingReply() {
    Client::Reply reply = Get("/v1/models");
    for (int i = 0; i < 200 && reply.status != 503; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      reply = Get("/v1/models");
    }
    return reply;
  }

  // The stream's end after the drain: OpenAI's error event and [DONE], the chunked body's end.
  static void ExpectShutDownEvents(Client& stream) {
    Client::Reply rest = RestOfStream(stream);
    std::vector<std::string> events = Events(rest.body);
    ASSERT_EQ(events.size(), 2u) << rest.body;
    Json error = Json::parse(events[0])["error"];
    EXPECT_EQ(error["message"], Gateway::kShutDownMessage) << events[0];
    EXPECT_EQ(events[1], "[DONE]");
    EXPECT_TRUE(rest.ended) << "no terminating chunk: the stream was cut off";
  }

  int port_ = 0;
  pid_t pid_ = 0;
  std::atomic<bool> exited_{false};
  std::thread runner_;
  RunResult result_;
};

TEST_F(GatewaySignalTest, DrainTimeoutEndsOpenStreamsWithTheirErrorEvent) {
  // 3 s: the 503 checks below run within the drain, on a loaded machine too.
  ASSERT_NO_FATAL_FAILURE(Launch({"--drain-timeout=3"}));
  auto openai = OpenStream(port_, "/v1/completions", R"({"prompt":"hang","stream":true})");
  auto tgi = OpenStream(port_, "/generate_stream", R"({"inputs":"hang"})");
  Client pooled(port_);  // a keep-alive connection, as a client's pool holds
  ASSERT_TRUE(pooled.Send("GET /v1/models HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(pooled.ReadReply(&reply));
  ASSERT_EQ(reply.status, 200);

  const absl::Time signalled = absl::Now();
  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  reply = DrainingReply();
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.headers["retry-after"], "1");
  EXPECT_EQ(reply.headers["connection"], "close");
  ASSERT_TRUE(pooled.Send("GET /v1/models HTTP/1.1\r\n\r\n"));
  reply = Client::Reply();
  ASSERT_TRUE(pooled.ReadReply(&reply));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.headers["connection"], "close") << "a pooled connection leaves the gateway";

  ExpectShutDownEvents(*openai);
  Client::Reply rest = RestOfStream(*tgi);
  std::vector<std::string> events = Events(rest.body);
  ASSERT_EQ(events.size(), 1u) << rest.body;
  EXPECT_EQ(Json::parse(events[0])["error"], Gateway::kShutDownMessage);
  EXPECT_TRUE(rest.ended);
  EXPECT_GE(absl::Now() - signalled, absl::Milliseconds(2900)) << "before --drain-timeout";

  EXPECT_LT(Exited(signalled), absl::Seconds(8));
  EXPECT_EQ(result_.exit_code, 0) << result_.output;
  EXPECT_FALSE(result_.timed_out) << result_.output;
  EXPECT_TRUE(fake_.WaitFor([&] { return fake_.cancelled_ >= 2; })) << "backend calls cancelled";
}

// As uvicorn and vLLM: a second signal does not wait out --drain-timeout.
TEST_F(GatewaySignalTest, SecondSignalEndsTheDrainAtOnce) {
  ASSERT_NO_FATAL_FAILURE(Launch({"--drain-timeout=60"}));
  auto stream = OpenStream(port_, "/v1/completions", R"({"prompt":"hang","stream":true})");
  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  EXPECT_EQ(DrainingReply().status, 503);
  EXPECT_FALSE(stream->ReadableWithin(300)) << "the stream runs on through the drain";

  const absl::Time again = absl::Now();
  ASSERT_EQ(kill(pid_, SIGINT), 0);
  ExpectShutDownEvents(*stream);
  EXPECT_LT(absl::Now() - again, absl::Seconds(5));
  EXPECT_LT(Exited(again), absl::Seconds(8));
  EXPECT_EQ(result_.exit_code, 0) << result_.output;
  EXPECT_TRUE(absl::StrContains(result_.output, "ending the drain now")) << result_.output;
}

}  // namespace
}  // namespace blossom::gateway
