#include "server/testing/run_binary.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace blossom::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The test's environment with `settings` applied: "NAME=value" replaces or adds NAME, a bare
// "NAME" removes it.
std::vector<std::string> Environment(const std::vector<std::string>& settings) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const std::string& setting : settings) {
    const std::string prefix = setting.substr(0, setting.find('=')) + "=";
    const bool unset = setting.find('=') == std::string::npos;
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& variable) {
                               return variable.compare(0, prefix.size(), prefix) == 0;
                             }),
              env.end());
    if (!unset) env.push_back(setting);
  }
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// One end of a pipe the child writes to, and where its bytes go.
struct Stream {
  int fd = -1;
  std::string* sink = nullptr;
};

// Reads what is available now from the open streams, waiting up to `wait` for something to
// arrive; closes a stream at end of file. False when nothing happened (no bytes, no end of file).
bool ReadAvailable(std::vector<Stream>& streams, std::chrono::milliseconds wait) {
  std::vector<pollfd> fds;
  for (const Stream& s : streams) fds.push_back({s.fd, POLLIN, 0});  // poll skips fd -1
  const int ready = poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  if (ready < 0) return errno == EINTR;
  if (ready == 0) return false;
  char buffer[65536];
  for (size_t i = 0; i < streams.size(); ++i) {
    if (streams[i].fd < 0 || fds[i].revents == 0) continue;
    const ssize_t n = read(streams[i].fd, buffer, sizeof buffer);
    if (n > 0) {
      streams[i].sink->append(buffer, n);
    } else if (n == 0 || errno != EINTR) {
      close(streams[i].fd);
      streams[i].fd = -1;
    }
  }
  return true;
}

bool AnyOpen(const std::vector<Stream>& streams) {
  for (const Stream& s : streams) {
    if (s.fd >= 0) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env_changes, int stdout_fd,
                                   int stderr_fd) {
  if (argv.empty()) return absl::InvalidArgumentError("no program given");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
  // Signals as a process started from a shell has them: none blocked, none ignored (a test
  // runner or gRPC may have blocked or ignored some, e.g. SIGPIPE, and a child inherits both).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args = argv;
  std::vector<std::string> env = Environment(env_changes);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);
  pid_t pid = -1;
  // posix_spawnp searches PATH only for a name without '/'. glibc reports a failed exec
  // (missing or non-executable program) here rather than as the child's exit code 127.
  const int error = posix_spawnp(&pid, c_args[0], &actions, &attr, c_args.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (error != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(error)));
  }
  return pid;
}

RunResult RunBinary(const std::vector<std::string>& argv, const RunOptions& options) {
  RunResult result;
  std::string* stderr_sink = options.merge_stderr ? &result.output : &result.error;
  if (argv.empty()) {
    *stderr_sink += "[RunBinary: no program given]\n";
    return result;
  }
  // Close-on-exec, so that a child spawned meanwhile by another thread does not inherit our
  // write ends (and keep our reads from seeing end of file); dup2 clears it for this child.
  int out_pipe[2], err_pipe[2] = {-1, -1};
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    *stderr_sink += absl::StrCat("[RunBinary: pipe: ", std::strerror(errno), "]\n");
    return result;
  }
  if (!options.merge_stderr && pipe2(err_pipe, O_CLOEXEC) != 0) {
    *stderr_sink += absl::StrCat("[RunBinary: pipe: ", std::strerror(errno), "]\n");
    close(out_pipe[0]);
    close(out_pipe[1]);
    return result;
  }
  pid_t pid = -1;
  const absl::StatusOr<pid_t> spawned = SpawnProcess(
      argv, options.env, out_pipe[1], options.merge_stderr ? out_pipe[1] : err_pipe[1]);
  if (spawned.ok()) pid = *spawned;
  close(out_pipe[1]);
  if (err_pipe[1] >= 0) close(err_pipe[1]);
  std::vector<Stream> streams = {{out_pipe[0], &result.output}};
  if (err_pipe[0] >= 0) streams.push_back({err_pipe[0], &result.error});
  if (!spawned.ok()) {
    for (Stream& s : streams) close(s.fd);
    *stderr_sink += absl::StrCat("[RunBinary: ", spawned.status().message(), "]\n");
    return result;
  }

  Clock::time_point deadline = Clock::now() + absl::ToChronoMilliseconds(options.timeout);
  bool killed = false;
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(pid, &status, WNOHANG)) != pid) {
    if (waited < 0 && errno != EINTR) {
      *stderr_sink += absl::StrCat("[RunBinary: waitpid: ", std::strerror(errno), "]\n");
      break;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline && !result.timed_out) {
      result.timed_out = true;
      kill(pid, options.stop_signal);
      deadline = now + absl::ToChronoMilliseconds(options.kill_after);
      *stderr_sink += absl::StrCat("[RunBinary: ", argv[0], " still running after ",
                                   absl::FormatDuration(options.timeout), "; sent signal ",
                                   options.stop_signal, "]\n");
    } else if (now >= deadline && !killed) {
      killed = true;  // SIGKILL always ends it: from here on, only wait for waitpid
      kill(pid, SIGKILL);
      *stderr_sink += absl::StrCat("[RunBinary: still running ",
                                   absl::FormatDuration(options.kill_after),
                                   " after that; sent SIGKILL]\n");
    }
    // Short waits: the loop also has to notice the exit of a child that closed its output
    // early, and the deadlines.
    ReadAvailable(streams, std::chrono::milliseconds(AnyOpen(streams) ? 50 : 10));
  }
  // Whatever the child wrote is in the pipes now. Read until they are empty rather than until
  // end of file: a process the child started may still hold them open.
  while (AnyOpen(streams) && ReadAvailable(streams, std::chrono::milliseconds(0))) {
  }
  for (Stream& s : streams) {
    if (s.fd >= 0) close(s.fd);
  }
  if (waited == pid && WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (waited == pid && WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

std::string RunfilePath(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir == nullptr) return relative;
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir, "/", workspace ? workspace : "blossom", "/", relative);
}

}  // namespace blossom::testing
