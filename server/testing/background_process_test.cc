// BackgroundProcess against the system's sh and sleep: the log, signals (delivered even when
// the test has them blocked), the exit status, a program that cannot start, and no program
// left running after the object.
#include "server/testing/background_process.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace blossom::testing {
namespace {

std::string LogPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

TEST(BackgroundProcessTest, LogSignalAndExitStatus) {
  // Blocked here, as gRPC's threads or a test runner may leave it: the child must not inherit
  // that, or SIGTERM would never reach a server under test.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  BackgroundProcess child({"sh", "-c", "echo ready; echo to-stderr >&2; exec sleep 60"},
                          LogPath("signal.log"));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(child.started()) << child.Log();
  ASSERT_TRUE(child.WaitForLog("to-stderr", absl::Seconds(30))) << child.Log();
  EXPECT_TRUE(absl::StrContains(child.Log(), "ready\n"));
  EXPECT_FALSE(child.WaitForExit(absl::Milliseconds(100)).has_value());
  child.Signal(SIGTERM);
  const std::optional<int> status = child.WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
  // Ended: the same status again, and signals go nowhere.
  EXPECT_EQ(child.WaitForExit(absl::ZeroDuration()), status);
  child.Signal(SIGKILL);
}

TEST(BackgroundProcessTest, ExitCodeAndEnvironment) {
  BackgroundProcess child({"sh", "-c", "echo \"value=$BLOSSOM_BG_TEST\"; exit 7"},
                          LogPath("env.log"), {"BLOSSOM_BG_TEST=seven"});
  ASSERT_TRUE(child.started()) << child.Log();
  const std::optional<int> status = child.WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 7);
  EXPECT_EQ(child.Log(), "value=seven\n");
}

TEST(BackgroundProcessTest, WaitForLogGivesUpWhenTheProgramEndedWithoutIt) {
  BackgroundProcess child({"sh", "-c", "echo something else"}, LogPath("ended.log"));
  ASSERT_TRUE(child.started()) << child.Log();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(child.WaitForLog("never written", absl::Seconds(60)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // not the whole timeout
}

TEST(BackgroundProcessTest, AProgramThatCannotStartSaysWhy) {
  BackgroundProcess child({"/nonexistent/blossom-no-such-binary"}, LogPath("missing.log"));
  EXPECT_FALSE(child.started());
  EXPECT_TRUE(absl::StrContains(child.start_error(), "/nonexistent/blossom-no-such-binary"))
      << child.start_error();
  EXPECT_TRUE(absl::StrContains(child.Log(), child.start_error()));
  EXPECT_FALSE(child.WaitForLog("anything", absl::Seconds(1)));
  EXPECT_FALSE(child.WaitForExit(absl::ZeroDuration()).has_value());
}

TEST(BackgroundProcessTest, TheDestructorEndsARunningProgram) {
  pid_t pid = -1;
  {
    BackgroundProcess child({"sleep", "60"}, LogPath("destructor.log"));
    ASSERT_TRUE(child.started());
    pid = child.pid();
  }
  // Killed and reaped: the pid no longer names a process of ours.
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace blossom::testing
