// A fixed-size thread pool running tasks in submission order (the HTTP server's handlers).
#ifndef BLOSSOM_SERVER_HTTP_WORKER_POOL_H_
#define BLOSSOM_SERVER_HTTP_WORKER_POOL_H_

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace blossom::http::internal {

// Thread-safe: Submit and Stop may be called from any thread but a worker's own (Stop joins).
// A fixed-size pool running handlers in submission order.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      threads_.emplace_back([this] { Run(); });
    }
  }
  ~WorkerPool() { Stop(); }

  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  // Drops queued tasks and joins the threads (running tasks finish first).
  void Stop() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      dropped.swap(tasks_);
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    // Dropped tasks are destroyed here, outside the lock: their writers may call back in.
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopped_ || !tasks_.empty(); });
        if (stopped_) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopped_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace blossom::http::internal

#endif  // BLOSSOM_SERVER_HTTP_WORKER_POOL_H_
