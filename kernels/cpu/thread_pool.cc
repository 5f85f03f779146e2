#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "kernels/cpu/cpu_budget.h"

namespace blossom {

ThreadPool::ThreadPool(int num_threads, bool spin_wait) : spin_wait_(spin_wait) {
  if (num_threads <= 0) num_threads = UsableCpus();
  num_threads_ = std::max(1, num_threads);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  // Called with mutex_ held; releases it while running a chunk.
  std::unique_lock<std::mutex> lock(mutex_, std::adopt_lock);
  while (job_ != nullptr && next_begin_ < job_n_) {
    int64_t begin = next_begin_;
    int64_t end = std::min(job_n_, begin + job_chunk_);
    next_begin_ = end;
    const auto* job = job_;
    lock.unlock();
    (*job)(begin, end);
    lock.lock();
  }
  lock.release();
}

template <typename Done>
bool ThreadPool::SpinFor(const Done& done) const {
  if (!spin_wait_) return done();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    SpinFor([&] { return stopping_.load() || generation_.load() != seen; });
    std::unique_lock<std::mutex> lock(mutex_);
    work_ready_.wait(lock, [&] { return stopping_.load() || generation_.load() != seen; });
    if (stopping_) return;
    seen = generation_;
    ++active_workers_;
    lock.release();
    RunChunks();
    lock = std::unique_lock<std::mutex>(mutex_, std::adopt_lock);
    if (--active_workers_ == 0) work_done_.notify_all();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk, ChunkFn fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (num_threads_ == 1 || n <= min_chunk) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  // A few chunks per thread balances uneven work without much overhead.
  int64_t chunk = std::max(min_chunk, (n + 4 * num_threads_ - 1) / (4 * num_threads_));
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  next_begin_ = 0;
  ++generation_;
  work_ready_.notify_all();
  lock.release();
  RunChunks();
  // Every chunk is claimed now, each by a thread counted in active_workers_ until it finished
  // (claims and the count change under mutex_), so a zero count means every chunk is done.
  mutex_.unlock();
  SpinFor([&] { return active_workers_.load() == 0; });
  lock = std::unique_lock<std::mutex>(mutex_);
  work_done_.wait(lock, [&] { return active_workers_.load() == 0; });
  job_ = nullptr;
}

}  // namespace blossom
