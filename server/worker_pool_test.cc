#include "server/worker_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(WorkerPoolTest, RunsEveryAcceptedTask) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2, 100);
    for (int i = 0; i < 50; ++i) EXPECT_TRUE(pool.TryPost([&] { ++ran; }));
  }  // the destructor runs what was accepted
  EXPECT_EQ(ran.load(), 50);
}

// Running and queued tasks both count: a full pool refuses at once, and takes tasks again as
// they finish.
TEST(WorkerPoolTest, RefusesPastMaxPendingAndRecovers) {
  WorkerPool pool(1, 2);
  absl::Notification release;
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.TryPost([&] {
    release.WaitForNotification();
    ++ran;
  }));
  ASSERT_TRUE(pool.TryPost([&] { ++ran; }));
  EXPECT_EQ(pool.pending(), 2u);
  EXPECT_FALSE(pool.TryPost([&] { ADD_FAILURE() << "a refused task ran"; }));
  release.Notify();
  for (int i = 0; i < 20000 && pool.pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pool.pending(), 0u);
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(pool.completed(), 2);
  EXPECT_TRUE(pool.TryPost([&] { ++ran; }));
}

TEST(WorkerPoolTest, ReportsEachAcceptedAndFinishedTask) {
  std::atomic<int> pending{0}, peak{0};
  {
    WorkerPool pool(2, 8, [&](int delta) {
      const int now = pending += delta;
      EXPECT_GE(now, 0);
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
    });
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(pool.TryPost([] {}));
  }
  EXPECT_EQ(pending.load(), 0);
  EXPECT_GE(peak.load(), 1);
}

TEST(WorkerPoolTest, ATaskThatThrowsLeavesThePoolServing) {
  WorkerPool pool(1, 4);
  std::promise<void> second;
  ASSERT_TRUE(pool.TryPost([] { throw std::runtime_error("a bug"); }));
  ASSERT_TRUE(pool.TryPost([&] { second.set_value(); }));
  second.get_future().get();
}

TEST(WorkerPoolTest, TasksRunOffTheCallersThread) {
  WorkerPool pool(1, 1);
  std::promise<std::thread::id> ran_on;  // std, not absl::Notification: TSan sees its hand-off
  std::future<std::thread::id> got = ran_on.get_future();
  ASSERT_TRUE(pool.TryPost([&] { ran_on.set_value(std::this_thread::get_id()); }));
  EXPECT_NE(got.get(), std::this_thread::get_id());
  EXPECT_EQ(pool.threads(), 1);
}

}  // namespace
}  // namespace blossom
