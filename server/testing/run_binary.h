// Test helper: runs a program (a built binary from the test's runfiles, or a tool on PATH) with
// an argument vector and captures its exit code and output, for tests of command-line
// front ends (flag checks, exit codes, what they print).
//
// No shell is involved: each argument reaches the program exactly as given, so the tests need
// no quoting and a space or quote in an argument cannot change the command. stdin is
// /dev/null, so a program that waits for input ends instead of hanging the test.
// Thread-safety: RunBinary may be called from several threads at once (the pipes are
// close-on-exec, so one child never holds another's output open).
#ifndef BLOSSOM_SERVER_TESTING_RUN_BINARY_H_
#define BLOSSOM_SERVER_TESTING_RUN_BINARY_H_

#include <sys/types.h>

#include <csignal>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace blossom::testing {

struct RunOptions {
  // Changes to the test's own environment, which the program otherwise inherits: "NAME=value"
  // sets NAME (replacing the test's value), a bare "NAME" unsets it.
  std::vector<std::string> env;
  // true: stderr goes with stdout into RunResult::output, interleaved as written (a program
  // that logs to both reads as one log). false: stderr goes to RunResult::error.
  bool merge_stderr = true;
  // A program still running after `timeout` is sent `stop_signal` (RunResult::timed_out),
  // then SIGKILL if it is still running `kill_after` later. A test that expects the program
  // to run until stopped (a server) sets a short timeout and checks timed_out; for the rest
  // the timeout turns a hang into a failure that says so, before Bazel's own test timeout.
  absl::Duration timeout = absl::Seconds(30);
  int stop_signal = SIGTERM;
  absl::Duration kill_after = absl::Seconds(10);
};

struct RunResult {
  // The program's exit status; -1 when a signal ended it or it could not be started.
  int exit_code = -1;
  // The signal that ended it, else 0.
  int signal = 0;
  // It was still running at RunOptions::timeout and was sent the stop signal. exit_code and
  // signal then say how it ended after that (a server that drains on SIGTERM exits 0).
  bool timed_out = false;
  // stdout, and stderr too when RunOptions::merge_stderr.
  std::string output;
  // stderr when not merged. When the program timed out or could not be started, a line that
  // says so ("[RunBinary: ...]") is appended to whichever of output/error receives stderr, so
  // a test that prints that stream on failure shows why.
  std::string error;
};

// Runs argv[0] with arguments argv[1...] and waits for it to end. argv[0] is a path, or a
// name without '/' looked up on PATH (as execvp does).
RunResult RunBinary(const std::vector<std::string>& argv, const RunOptions& options = {});

// Starts argv as RunBinary does (PATH lookup for a name without '/', no shell, stdin /dev/null,
// no signal blocked or ignored, `env_changes` as RunOptions::env) with its stdout on `stdout_fd`
// and its stderr on `stderr_fd`, and returns its pid without waiting: the caller reaps it.
// The error names the program when it cannot be started.
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env_changes, int stdout_fd,
                                   int stderr_fd);

// Absolute path of `relative` (e.g. "clients/blossom") in the test's runfiles: the test target
// must list it in `data`. Relative to the working directory when run outside Bazel.
std::string RunfilePath(const std::string& relative);

}  // namespace blossom::testing

#endif  // BLOSSOM_SERVER_TESTING_RUN_BINARY_H_
