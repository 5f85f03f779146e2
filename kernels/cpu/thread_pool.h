// A fixed pool of worker threads for data-parallel loops in the CPU kernels.
//
// ParallelFor splits [0, n) into contiguous chunks; how work is split never changes what each
// index computes, so results are identical for any thread count (the kernels rely on this for
// batch invariance and reproducibility).
//
// Thread-safety: ParallelFor may be called from one thread at a time per pool (the engine thread);
// calls from several threads are serialised by an internal mutex.
//
// Waiting (spin_wait): a worker that finished a job spins (with a pause instruction) for up to
// kSpinMicros before it sleeps on the condition variable, and so does the calling thread waiting
// for the workers' chunks. A decode step runs a few hundred short ParallelFors back to back;
// sleeping and waking through the kernel between each cost microseconds per op (the scheduler's
// functions were about 4% of a batch-1 decode profile). Idle pools sleep after the spin. Only
// where the process's pools have a core per thread: a spinning thread on a shared core takes
// time from the thread it waits for.
#ifndef BLOSSOM_KERNELS_CPU_THREAD_POOL_H_
#define BLOSSOM_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace blossom {

// A non-owning reference to a callable fn(begin, end). Unlike std::function it never allocates:
// ParallelFor runs for nearly every op of every step, so a decode step should not touch the heap.
// Valid only while the referenced callable lives (ParallelFor's duration).
class ChunkFn {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same<std::decay_t<F>, ChunkFn>::value>>
  ChunkFn(const F& fn)  // NOLINT: implicit, so callers pass lambdas as before
      : fn_(&fn), call_([](const void* f, int64_t b, int64_t e) {
          (*static_cast<const F*>(f))(b, e);
        }) {}
  void operator()(int64_t begin, int64_t end) const { call_(fn_, begin, end); }

 private:
  const void* fn_;
  void (*call_)(const void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  // num_threads <= 0 picks the hardware concurrency. The calling thread also does work, so the
  // pool starts num_threads - 1 workers.
  explicit ThreadPool(int num_threads, bool spin_wait = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least min_chunk long
  // (except possibly the last). Returns when all chunks are done.
  void ParallelFor(int64_t n, int64_t min_chunk, ChunkFn fn);

 private:
  void WorkerLoop();
  void RunChunks();
  // With spin_wait_, spins until done() or kSpinMicros have passed; returns done()'s last value.
  template <typename Done>
  bool SpinFor(const Done& done) const;

  static constexpr int64_t kSpinMicros = 100;

  int num_threads_;
  bool spin_wait_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one ParallelFor at a time

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  // Written under mutex_; atomic so that the spins can read them without it.
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> generation_{0};
  // The current job (valid while pending_ > 0 or workers are in it).
  const ChunkFn* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  int64_t next_begin_ = 0;
  std::atomic<int> active_workers_{0};
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_THREAD_POOL_H_
