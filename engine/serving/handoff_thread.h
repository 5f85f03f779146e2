// A worker thread that runs batches of items handed to it, one batch at a time, in the order
// they were handed over. The engine hands it each step's events, so that streaming them to their
// clients (gRPC writes, queue pushes) runs while the next step is scheduled and computed instead
// of between steps.
//
// Backpressure: at most `max_waiting` batches wait besides the one running; Hand() blocks while
// that many wait, so a slow consumer slows the producer down instead of queueing without bound.
//
// Thread-safety: Hand() and Flush() may be called from any thread except the worker itself (they
// would wait for it); OnWorkerThread() tells. The destructor runs every batch handed over, then
// joins.
#ifndef BLOSSOM_ENGINE_SERVING_HANDOFF_THREAD_H_
#define BLOSSOM_ENGINE_SERVING_HANDOFF_THREAD_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace blossom {

template <typename Item>
class HandoffThread {
 public:
  using RunBatch = std::function<void(std::vector<Item>& batch)>;

  explicit HandoffThread(RunBatch run, size_t max_waiting = 1)
      : run_(std::move(run)), max_waiting_(max_waiting < 1 ? 1 : max_waiting) {
    thread_ = std::thread([this] { Work(); });
  }
  ~HandoffThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    thread_.join();
  }
  HandoffThread(const HandoffThread&) = delete;
  HandoffThread& operator=(const HandoffThread&) = delete;

  // Queues `batch` (taken: left empty) to run after every batch handed over before it.
  void Hand(std::vector<Item>& batch) {
    if (batch.empty()) return;
    std::unique_lock<std::mutex> lock(mutex_);
    space_cv_.wait(lock, [&] { return waiting_.size() < max_waiting_; });
    waiting_.push_back(std::move(batch));
    batch.clear();
    work_cv_.notify_one();
  }

  // Returns once every batch handed over before the call has run.
  void Flush() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [&] { return waiting_.empty() && !running_; });
  }

  bool OnWorkerThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Work() {
    std::vector<Item> batch;
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      work_cv_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
      if (waiting_.empty()) return;  // stopping, and everything handed over has run
      batch = std::move(waiting_.front());
      waiting_.pop_front();
      running_ = true;
      space_cv_.notify_all();
      lock.unlock();
      run_(batch);
      batch.clear();
      lock.lock();
      running_ = false;
      if (waiting_.empty()) idle_cv_.notify_all();
    }
  }

  const RunBatch run_;
  const size_t max_waiting_;
  std::mutex mutex_;
  std::condition_variable work_cv_, space_cv_, idle_cv_;
  std::deque<std::vector<Item>> waiting_;  // guarded by mutex_
  bool running_ = false;                   // guarded by mutex_
  bool stopping_ = false;                  // guarded by mutex_
  std::thread thread_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SERVING_HANDOFF_THREAD_H_
