#include "server/worker_pool.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "spdlog/spdlog.h"

namespace blossom {

WorkerPool::WorkerPool(int threads, size_t max_pending,
                       std::function<void(int)> on_pending_change)
    : max_pending_(std::max<size_t>(max_pending, static_cast<size_t>(std::max(threads, 1)))),
      on_pending_change_(std::move(on_pending_change)) {
  try {
    for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
  } catch (...) {
    Stop();  // the threads started so far, before the error leaves the constructor
    throw;
  }
}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

bool WorkerPool::TryPost(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || pending_ >= max_pending_) return false;
    ++pending_;
    if (on_pending_change_) on_pending_change_(+1);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t WorkerPool::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

int64_t WorkerPool::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

void WorkerPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every accepted task has run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {  // a bug in the task; the pool serves on
      spdlog::error("worker pool: a task threw: {}", e.what());
    } catch (...) {
      spdlog::error("worker pool: a task threw");
    }
    task = nullptr;  // its captures are released outside the lock too
    lock.lock();
    --pending_;
    ++completed_;
    if (on_pending_change_) on_pending_change_(-1);
  }
}

}  // namespace blossom
