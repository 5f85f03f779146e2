// The blossom-gateway binary's start-up checks: flag combinations it refuses with exit code 2
// and a message naming the flags, before it listens; and the warning for a gateway that holds a
// backend key but checks no client keys.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/testing/run_binary.h"

namespace {

using ::blossom::testing::RunBinary;
using ::blossom::testing::RunfilePath;
using ::blossom::testing::RunOptions;
using ::blossom::testing::RunResult;

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/", name);
}

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = TmpPath(name);
  std::ofstream(path) << contents;
  return path;
}

// blossom-gateway (a runfile) with `args` on an ephemeral port, stopped by SIGTERM after
// `seconds` if it is still running then (it drains and exits; RunResult::timed_out says so).
// spdlog's default logger writes to stdout: both streams, merged, are the log (`output`).
RunResult Gateway(const std::vector<std::string>& args, int seconds = 10) {
  std::vector<std::string> argv = {RunfilePath("clients/gateway/blossom-gateway"), "--port=0",
                                   "--backend=127.0.0.1:1"};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions options;
  options.timeout = absl::Seconds(seconds);
  return RunBinary(argv, options);
}

TEST(GatewayMainTest, ClientCertificateNeedsItsKeyAndTls) {
  const std::string pem = WriteFile("client.pem", "-----BEGIN CERTIFICATE-----\n");
  RunResult run = Gateway({"--backend-tls", "--backend-tls-cert=" + pem});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--backend-tls-cert and --backend-tls-key go together"))
      << run.output;
  run = Gateway({"--backend-tls", "--backend_tls_key=" + pem});  // underscores alike
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "go together")) << run.output;
  run = Gateway({"--backend-tls-cert=" + pem, "--backend-tls-key=" + pem});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--backend-tls-cert needs TLS (--backend-tls)"))
      << run.output;
  run = Gateway({"--backend-tls", "--backend-tls-cert=" + pem, "--backend-tls-key=/nonexistent"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--backend-tls-key: cannot read /nonexistent"))
      << run.output;
}

TEST(GatewayMainTest, BackendKeyFile) {
  RunResult run = Gateway({"--backend-api-key-file=" + WriteFile("empty.key", "\n")});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "holds no key")) << run.output;
  run = Gateway({"--backend-api-key-file=/nonexistent/key"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--backend-api-key-file: cannot read")) << run.output;
  const std::string key = WriteFile("backend.key", "backend-secret\n");
  run = Gateway({"--backend-api-key-file=" + key, "--backend-api-key=other"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(
      absl::StrContains(run.output, "give one of --backend-api-key and --backend-api-key-file"))
      << run.output;
  run = Gateway({"--backend-api-key=has space"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "has space"))
      << "the key is not logged: " << run.output;
}

// A gateway with a backend key and no client keys is an open proxy holding that key: it starts
// (a trusted network may want that) but says so. With --api-keys-file it does not.
TEST(GatewayMainTest, WarnsOfAnOpenProxyHoldingABackendKey) {
  const std::string key = WriteFile("backend2.key", "backend-secret\n");
  RunResult run = Gateway({"--backend-api-key-file=" + key}, 2);
  EXPECT_TRUE(run.timed_out) << "it should have been serving until stopped: " << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "checks no client keys (no --api-keys-file)"))
      << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "backend-secret")) << run.output;
  const std::string keys = WriteFile("keys.txt", "client-key\n");
  run = Gateway({"--backend-api-key-file=" + key, "--api-keys-file=" + keys}, 2);
  EXPECT_TRUE(run.timed_out) << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "checks no client keys")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "listening on")) << run.output;
  // client-key is 10 characters: warned about by its line, never quoted.
  EXPECT_TRUE(absl::StrContains(run.output, "--api-keys-file: the keys on line(s) 1 are shorter"))
      << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "client-key")) << run.output;
}

TEST(GatewayMainTest, MetricsKeysFileIsLoadedAsTheKeysFile) {
  RunResult run = Gateway({"--metrics-api-keys-file=/nonexistent/keys"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--metrics-api-keys-file")) << run.output;
  run = Gateway({"--metrics-api-keys-file=" + WriteFile("none.txt", "# no keys\n")});
  EXPECT_EQ(run.exit_code, 2) << run.output;
}

// Logs: an unknown level or format stops the start (before, an unknown level silenced the log);
// --log-format=json writes one JSON object per line.
TEST(GatewayMainTest, LogLevelAndFormat) {
  RunResult run = Gateway({"--log-level=verbose"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--log-level: 'verbose'")) << run.output;
  run = Gateway({"--log-format=xml"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--log-format")) << run.output;
  run = Gateway({"--log-format=json"}, 2);
  EXPECT_TRUE(run.timed_out) << run.output;
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(run.output, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "[RunBinary:")) continue;  // the helper's own note
    ++lines;
    EXPECT_TRUE(absl::StartsWith(line, "{\"timestamp\":\"")) << line;
    EXPECT_TRUE(absl::StrContains(line, "\"target\":\"blossom-gateway\"")) << line;
  }
  EXPECT_GE(lines, 2) << run.output;  // listening, and the drain at SIGTERM
}

}  // namespace
