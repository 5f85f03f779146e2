#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    for (bool spin : {false, true}) {
      ThreadPool pool(threads, spin);
      for (int64_t n : {0, 1, 5, 97, 10000}) {
        std::vector<std::atomic<int>> hits(n);
        for (auto& h : hits) h = 0;
        pool.ParallelFor(n, 3, [&](int64_t b, int64_t e) {
          EXPECT_LE(b, e);
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPoolTest, ManyConsecutiveJobs) {
  for (bool spin : {false, true}) {
    ThreadPool pool(4, spin);
    std::atomic<int64_t> sum{0};
    for (int round = 0; round < 2000; ++round) {
      pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) { sum += e - b; });
    }
    EXPECT_EQ(sum.load(), 2000 * 64);
  }
}

// Workers spin for a while after a job, then sleep on the condition variable: jobs after the
// workers fell asleep still run every chunk, on more than one thread.
TEST(ThreadPoolTest, JobsAfterTheWorkersSleptStillUseThem) {
  ThreadPool pool(3, /*spin_wait=*/true);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // far longer than the spin
    std::vector<std::atomic<int>> hits(3000);
    for (auto& h : hits) h = 0;
    std::atomic<int> slow_chunks_elsewhere{0};
    const std::thread::id caller = std::this_thread::get_id();
    pool.ParallelFor(3000, 100, [&](int64_t b, int64_t e) {
      // Slow chunks, so a woken worker gets some before the caller has taken them all.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (std::this_thread::get_id() != caller) slow_chunks_elsewhere++;
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int i = 0; i < 3000; ++i) ASSERT_EQ(hits[i], 1) << "round " << round << " i=" << i;
    EXPECT_GT(slow_chunks_elsewhere.load(), 0) << "round " << round;
  }
}

// Destroying a pool whose workers are still spinning after a job returns (the workers see the
// stop flag in their spin).
TEST(ThreadPoolTest, DestroysWhileWorkersSpin) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(4, /*spin_wait=*/true);
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(16, 1, [&](int64_t b, int64_t e) { sum += e - b; });
    EXPECT_EQ(sum.load(), 16);
  }
}

}  // namespace
}  // namespace blossom
