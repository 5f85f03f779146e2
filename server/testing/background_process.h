// Test helper: a program (usually a server binary) that runs in the background while the test
// talks to it and signals it, with its stdout and stderr together in a log file the test can
// poll. testing::RunBinary is for programs the test waits for; this is for the ones it stops.
//
// Thread-safety: Log may be called from any thread; the rest from the thread that owns the
// object. The destructor SIGKILLs and reaps a program
// still running, so a failed assertion never leaves one behind.
#ifndef BLOSSOM_SERVER_TESTING_BACKGROUND_PROCESS_H_
#define BLOSSOM_SERVER_TESTING_BACKGROUND_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace blossom::testing {

class BackgroundProcess {
 public:
  // Starts argv as testing::SpawnProcess does, with `env_changes` applied (RunOptions::env's
  // form), writing both streams to `log_path` (created or truncated).
  BackgroundProcess(const std::vector<std::string>& argv, std::string log_path,
                    const std::vector<std::string>& env_changes = {});
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Why it did not start; empty once started.
  const std::string& start_error() const { return start_error_; }
  void Signal(int number) const;
  // The log so far, prefixed with start_error() when it did not start.
  std::string Log() const;
  // Polls the log until it contains `needle`; false after `timeout`, or at once when the
  // program did not start or has exited without writing it.
  bool WaitForLog(const std::string& needle, absl::Duration timeout);
  // The wait status once the program has ended within `timeout` (WIFEXITED and the rest apply),
  // else nullopt: still running.
  std::optional<int> WaitForExit(absl::Duration timeout);

 private:
  const std::string log_path_;
  std::string start_error_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

}  // namespace blossom::testing

#endif  // BLOSSOM_SERVER_TESTING_BACKGROUND_PROCESS_H_
