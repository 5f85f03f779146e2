#include "engine/serving/handoff_thread.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(HandoffThreadTest, RunsEveryBatchInTheOrderHandedOverAndFlushWaitsForThem) {
  std::vector<int> seen;  // worker thread only, read after Flush
  bool on_worker = true;
  HandoffThread<int>* self = nullptr;
  HandoffThread<int> worker([&](std::vector<int>& batch) {
    on_worker = on_worker && self->OnWorkerThread();
    seen.insert(seen.end(), batch.begin(), batch.end());
  });
  self = &worker;
  EXPECT_FALSE(worker.OnWorkerThread());
  std::vector<int> want;
  for (int b = 0; b < 200; ++b) {
    std::vector<int> batch;
    for (int i = 0; i < b % 5; ++i) batch.push_back(b * 10 + i);  // some batches empty
    want.insert(want.end(), batch.begin(), batch.end());
    worker.Hand(batch);
    EXPECT_TRUE(batch.empty()) << "the batch is taken";
  }
  worker.Flush();
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(on_worker);
}

TEST(HandoffThreadTest, HandBlocksWhileMaxWaitingBatchesWait) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> ran{0};
  std::atomic<bool> started{false};
  HandoffThread<int> worker(
      [&](std::vector<int>&) {
        started = true;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return release; });
        ++ran;
      },
      /*max_waiting=*/1);
  std::vector<int> first = {1}, second = {2}, third = {3};
  worker.Hand(first);  // runs, and blocks in the callback
  while (!started.load()) std::this_thread::yield();
  worker.Hand(second);  // waits (one batch may wait)
  std::atomic<bool> third_handed{false};
  std::thread producer([&] {
    worker.Hand(third);  // blocks: one batch is already waiting
    third_handed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(third_handed.load()) << "a third batch was accepted while one waited";
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  producer.join();
  EXPECT_TRUE(third_handed.load());
  worker.Flush();
  EXPECT_EQ(ran.load(), 3);
}

TEST(HandoffThreadTest, TheDestructorRunsWhatWasHandedOver) {
  std::atomic<int> sum{0};
  {
    HandoffThread<int> worker([&](std::vector<int>& batch) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      for (int v : batch) sum += v;
    },
                              /*max_waiting=*/4);
    for (int b = 1; b <= 5; ++b) {
      std::vector<int> batch = {b};
      worker.Hand(batch);
    }
  }
  EXPECT_EQ(sum.load(), 1 + 2 + 3 + 4 + 5);
}

}  // namespace
}  // namespace blossom
