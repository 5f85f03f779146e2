// A few threads for blocking work that must not run on gRPC's callback threads, which are few
// and serve every call: the preparation of structured-output requests, whose constraint compile
// can take a second of CPU. The queue is bounded, so that overload is refused at once (TryPost
// returns false) instead of piling up.
//
// Thread-safe. Invariant (under mu_): pending_ counts the tasks accepted and not yet finished
// (queued or running), never more than max_pending. The destructor runs every task already
// accepted, then joins the threads. A task that throws is logged; the pool serves on.
#ifndef BLOSSOM_SERVER_WORKER_POOL_H_
#define BLOSSOM_SERVER_WORKER_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace blossom {

class WorkerPool {
 public:
  // `threads` >= 1 workers; at most `max_pending` (>= threads) tasks accepted at a time.
  // `on_pending_change`, if set, hears +1 for each task accepted and -1 for each finished
  // (under the pool's lock, so in order: keep it cheap, e.g. a gauge's Add).
  WorkerPool(int threads, size_t max_pending,
             std::function<void(int)> on_pending_change = nullptr);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`; false, without running it, when max_pending tasks are already accepted.
  bool TryPost(std::function<void()> task);
  size_t pending() const;
  int64_t completed() const;  // tasks run to their end so far
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Work();
  void Stop();  // runs what was accepted, then joins the threads

  const size_t max_pending_;
  const std::function<void(int)> on_pending_change_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  size_t pending_ = 0;                       // guarded by mu_
  int64_t completed_ = 0;                    // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace blossom

#endif  // BLOSSOM_SERVER_WORKER_POOL_H_
