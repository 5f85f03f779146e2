#ifndef BLOSSOM_ENGINE_MODEL_RANK_THREAD_H_
#define BLOSSOM_ENGINE_MODEL_RANK_THREAD_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace blossom {

// Runs tasks on one thread it owns, so every backend, CUDA and MPI call of this process's rank
// is made on the same thread whoever calls the runner (a CUDA rank's current device is set on
// that thread once, when its backend is created there; MPI runs MPI_THREAD_SERIALIZED).
// Thread-safety: Run is called by one thread at a time.
class RankThread {
 public:
  RankThread() : thread_([this] { Loop(); }) {}
  ~RankThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  absl::Status Run(const std::function<absl::Status()>& fn) {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &fn;
    done_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_; });
    return result_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || task_ != nullptr; });
      if (task_ == nullptr) return;  // stopping, nothing queued
      const std::function<absl::Status()>* task = task_;
      lock.unlock();
      absl::Status result = (*task)();
      lock.lock();
      result_ = std::move(result);
      task_ = nullptr;
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  const std::function<absl::Status()>* task_ = nullptr;  // guarded by mutex_
  bool done_ = false;                                     // guarded by mutex_
  bool stopping_ = false;                                 // guarded by mutex_
  absl::Status result_;                                   // guarded by mutex_
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_RANK_THREAD_H_
