// RunBinary against the system's own tools (sh, printf, sleep): arguments reach the program
// untouched, exit codes, the two streams, the environment, and the timeout's two stages.
#include "server/testing/run_binary.h"

#include <chrono>
#include <csignal>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace blossom::testing {
namespace {

TEST(RunBinaryTest, ArgumentsReachTheProgramAsGiven) {
  // What a shell would expand, split or choke on.
  const RunResult run = RunBinary({"printf", "%s|%s|%s", "a 'b' \"c\"", "$HOME *", ""});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "a 'b' \"c\"|$HOME *|");
  EXPECT_FALSE(run.timed_out);
  EXPECT_EQ(run.signal, 0);
}

TEST(RunBinaryTest, ExitCodeAndStreams) {
  const std::vector<std::string> argv = {"sh", "-c", "echo out; echo err >&2; exit 3"};
  RunResult merged = RunBinary(argv);
  EXPECT_EQ(merged.exit_code, 3);
  EXPECT_EQ(merged.output, "out\nerr\n");
  EXPECT_EQ(merged.error, "");
  RunOptions separate;
  separate.merge_stderr = false;
  RunResult apart = RunBinary(argv, separate);
  EXPECT_EQ(apart.exit_code, 3);
  EXPECT_EQ(apart.output, "out\n");
  EXPECT_EQ(apart.error, "err\n");
}

TEST(RunBinaryTest, OutputLargerThanAPipeBuffer) {
  const RunResult run = RunBinary({"sh", "-c", "head -c 1000000 /dev/zero"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output.size(), 1000000u);
}

TEST(RunBinaryTest, StdinIsEmpty) {
  const RunResult run = RunBinary({"cat"});  // would wait for input on a terminal
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output, "");
}

TEST(RunBinaryTest, EnvironmentSettingsChangeTheTestsOwn) {
  RunOptions options;
  options.env = {"BLOSSOM_RUN_BINARY_TEST=set", "HOME=/replaced", "TEST_TMPDIR", "PATH="};
  const RunResult run = RunBinary(
      {"/bin/sh", "-c",
       "printf '%s|%s|%s|%s|%s' \"$BLOSSOM_RUN_BINARY_TEST\" \"$HOME\" \"${PATH-unset}\" "
       "\"${TEST_TMPDIR-unset}\" \"${TEST_SRCDIR:+inherited}\""},
      options);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "set|/replaced||unset|inherited");
}

TEST(RunBinaryTest, AProgramThatCannotStartSaysSo) {
  RunResult run = RunBinary({"/nonexistent/program", "x"});
  EXPECT_EQ(run.exit_code, -1);
  EXPECT_TRUE(absl::StrContains(run.output, "cannot start /nonexistent/program")) << run.output;
  run = RunBinary({});
  EXPECT_EQ(run.exit_code, -1);
}

TEST(RunBinaryTest, TimeoutSendsTheStopSignal) {
  RunOptions options;
  options.timeout = absl::Milliseconds(200);
  options.merge_stderr = false;
  const RunResult run = RunBinary({"sleep", "30"}, options);
  EXPECT_TRUE(run.timed_out);
  EXPECT_EQ(run.exit_code, -1);
  EXPECT_EQ(run.signal, SIGTERM);
  EXPECT_TRUE(absl::StrContains(run.error, "still running after 200ms")) << run.error;
}

// A program that ignores the stop signal gets SIGKILL; its own child (here `sleep`, which
// inherits the ignored SIGTERM) still holds the pipe, and RunBinary returns without waiting
// for it.
TEST(RunBinaryTest, SigkillAfterTheStopSignalIsIgnored) {
  RunOptions options;
  // 2 s: the shell must have set its trap before the stop signal comes, on a loaded machine too.
  options.timeout = absl::Seconds(2);
  options.kill_after = absl::Milliseconds(200);
  const auto start = std::chrono::steady_clock::now();
  // `sleep 8` outlives the shell (it is orphaned) but ends soon after the test.
  const RunResult run = RunBinary({"sh", "-c", "trap '' TERM; echo ready; sleep 8; :"}, options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(6));
  EXPECT_TRUE(run.timed_out);
  EXPECT_EQ(run.signal, SIGKILL);
  EXPECT_TRUE(absl::StrContains(run.output, "ready\n")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "sent SIGKILL")) << run.output;
}

TEST(RunfilePathTest, UnderTheTestsRunfiles) {
  const std::string path = RunfilePath("server/testing/run_binary_test");
  EXPECT_TRUE(absl::EndsWith(path, "/server/testing/run_binary_test")) << path;
  EXPECT_EQ(RunBinary({path, "--gtest_list_tests", "--gtest_filter=RunfilePathTest.*"}).exit_code,
            0);
}

}  // namespace
}  // namespace blossom::testing
