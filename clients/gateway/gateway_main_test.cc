// The blossom-gateway binary's start-up checks: flag combinations it refuses with exit code 2
// and a message naming the flags, before it listens; and the warning for a gateway that holds a
// backend key but checks no client keys.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace {

struct GatewayRun {
  int rc = -1;
  std::string err;  // the log (stdout and stderr)
};

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
// `seconds` if it is still running then (it drains and exits 0; `timeout` then says 124).
GatewayRun Gateway(const std::vector<std::string>& args, int seconds = 10) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  std::string command = absl::StrCat(
      "timeout -s TERM ", seconds, " ",
      srcdir ? absl::StrCat(srcdir, "/", workspace ? workspace : "blossom", "/") : "",
      "clients/gateway/blossom-gateway --port=0 --backend=127.0.0.1:1");
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  // spdlog's default logger writes to stdout: both streams are the log.
  const std::string err_file = TmpPath("gateway.log");
  absl::StrAppend(&command, " >", err_file, " 2>&1");
  GatewayRun run;
  const int status = std::system(command.c_str());
  run.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream err;
  err << in.rdbuf();
  run.err = err.str();
  return run;
}

TEST(GatewayMainTest, ClientCertificateNeedsItsKeyAndTls) {
  const std::string pem = WriteFile("client.pem", "-----BEGIN CERTIFICATE-----\n");
  GatewayRun run = Gateway({"--backend-tls", "--backend-tls-cert=" + pem});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--backend-tls-cert and --backend-tls-key go together"))
      << run.err;
  run = Gateway({"--backend-tls", "--backend_tls_key=" + pem});  // underscores alike
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "go together")) << run.err;
  run = Gateway({"--backend-tls-cert=" + pem, "--backend-tls-key=" + pem});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--backend-tls-cert needs TLS (--backend-tls)"))
      << run.err;
  run = Gateway({"--backend-tls", "--backend-tls-cert=" + pem, "--backend-tls-key=/nonexistent"});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--backend-tls-key: cannot read /nonexistent"))
      << run.err;
}

TEST(GatewayMainTest, BackendKeyFile) {
  GatewayRun run = Gateway({"--backend-api-key-file=" + WriteFile("empty.key", "\n")});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "holds no key")) << run.err;
  run = Gateway({"--backend-api-key-file=/nonexistent/key"});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--backend-api-key-file: cannot read")) << run.err;
  const std::string key = WriteFile("backend.key", "backend-secret\n");
  run = Gateway({"--backend-api-key-file=" + key, "--backend-api-key=other"});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "give one of --backend-api-key and --backend-api-key-file"))
      << run.err;
  run = Gateway({"--backend-api-key=has space"});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "has space")) << "the key is not logged: " << run.err;
}

// A gateway with a backend key and no client keys is an open proxy holding that key: it starts
// (a trusted network may want that) but says so. With --api-keys-file it does not.
TEST(GatewayMainTest, WarnsOfAnOpenProxyHoldingABackendKey) {
  const std::string key = WriteFile("backend2.key", "backend-secret\n");
  GatewayRun run = Gateway({"--backend-api-key-file=" + key}, 2);
  EXPECT_EQ(run.rc, 124) << "it should have been serving until stopped: " << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "checks no client keys (no --api-keys-file)")) << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "backend-secret")) << run.err;
  const std::string keys = WriteFile("keys.txt", "client-key\n");
  run = Gateway({"--backend-api-key-file=" + key, "--api-keys-file=" + keys}, 2);
  EXPECT_EQ(run.rc, 124) << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "checks no client keys")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "listening on")) << run.err;
  // client-key is 10 characters: warned about by its line, never quoted.
  EXPECT_TRUE(absl::StrContains(run.err, "--api-keys-file: the keys on line(s) 1 are shorter"))
      << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "client-key")) << run.err;
}

TEST(GatewayMainTest, MetricsKeysFileIsLoadedAsTheKeysFile) {
  GatewayRun run = Gateway({"--metrics-api-keys-file=/nonexistent/keys"});
  EXPECT_EQ(run.rc, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--metrics-api-keys-file")) << run.err;
  run = Gateway({"--metrics-api-keys-file=" + WriteFile("none.txt", "# no keys\n")});
  EXPECT_EQ(run.rc, 2) << run.err;
}

}  // namespace
