#include "server/testing/background_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/testing/run_binary.h"

namespace blossom::testing {

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv, std::string log_path,
                                     const std::vector<std::string>& env_changes)
    : log_path_(std::move(log_path)) {
  // Close-on-exec: a child spawned meanwhile by another thread must not inherit the log.
  const int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    start_error_ = absl::StrCat("cannot open ", log_path_, ": ", std::strerror(errno));
    return;
  }
  absl::StatusOr<pid_t> pid = SpawnProcess(argv, env_changes, log_fd, log_fd);
  close(log_fd);
  if (pid.ok()) {
    pid_ = *pid;
  } else {
    start_error_ = std::string(pid.status().message());
  }
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ <= 0 || exit_status_.has_value()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void BackgroundProcess::Signal(int number) const {
  if (pid_ > 0 && !exit_status_.has_value()) kill(pid_, number);
}

std::string BackgroundProcess::Log() const {
  std::ifstream in(log_path_, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (start_error_.empty()) return text.str();
  return absl::StrCat("[BackgroundProcess: ", start_error_, "]\n", text.str());
}

bool BackgroundProcess::WaitForLog(const std::string& needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (started()) {
    if (Log().find(needle) != std::string::npos) return true;
    // Ended: what it wrote is all there is (read once more, after the exit).
    if (exit_status_.has_value() || WaitForExit(absl::ZeroDuration()).has_value()) {
      return Log().find(needle) != std::string::npos;
    }
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::optional<int> BackgroundProcess::WaitForExit(absl::Duration timeout) {
  if (pid_ <= 0 || exit_status_.has_value()) return exit_status_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      return exit_status_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace blossom::testing
