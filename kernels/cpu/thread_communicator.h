// In-process collectives for N tensor-parallel ranks running on N threads of one process (the
// CPU backend's tensor parallelism, and a stand-in for NCCL in tests).
//
// A ThreadCommunicatorGroup is created once for all ranks; communicator(r) is rank r's
// Communicator, to be used by rank r's thread only. Every collective is two rendezvous (barriers)
// over a shared slot table: ranks publish pointers to their buffers, wait for each other, read
// what they need, and wait again so no rank reuses its buffer while another still reads it.
//
// Determinism: AllReduceSum adds the ranks' buffers in rank order 0..N-1 (in fp32 for F16/BF16),
// each rank reducing one contiguous chunk into a shared result that every rank then copies, so
// all ranks get bit-identical results and the same inputs always give the same sum, whatever the
// thread timing.
//
// Failure: a rank that does not reach a collective within the group's timeout makes the waiting
// ranks return DeadlineExceeded naming the collective, and aborts the group. Abort() (from any
// thread) wakes every waiter with Aborted; until Reset(), every collective fails at once. Ranks
// that disagree on a collective (different op, dtype or size) all get InvalidArgument.
//
// Thread-safety: communicator(r) is used by one thread at a time; Abort and aborted() may be
// called from any thread; Reset only while no rank is inside a collective.
#ifndef BLOSSOM_KERNELS_CPU_THREAD_COMMUNICATOR_H_
#define BLOSSOM_KERNELS_CPU_THREAD_COMMUNICATOR_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "kernels/communicator.h"

namespace blossom {

class ThreadCommunicatorGroup {
 public:
  // `timeout`: how long a rank waits at one rendezvous for the others before giving up.
  explicit ThreadCommunicatorGroup(int world_size,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(300));
  ~ThreadCommunicatorGroup();
  ThreadCommunicatorGroup(const ThreadCommunicatorGroup&) = delete;
  ThreadCommunicatorGroup& operator=(const ThreadCommunicatorGroup&) = delete;

  int world_size() const { return world_size_; }
  // Rank r's communicator, owned by the group. 0 <= r < world_size.
  Communicator* communicator(int rank) const;

  // Wakes every rank waiting in a collective with an error carrying `reason`; later collectives
  // fail at once until Reset(). The first reason is kept.
  void Abort(const absl::Status& reason);
  bool aborted() const;
  // Re-arms an aborted group. Only while no rank is inside a collective (e.g. after every rank
  // thread has returned from a failed step).
  void Reset();

 private:
  class RankCommunicator;
  enum class Op : uint8_t { kAllReduceSum, kAllGather };
  struct Slot {
    Op op = Op::kAllReduceSum;
    const void* data = nullptr;
    DType dtype = DType::kF32;
    int64_t numel = 0;
  };

  // Waits until all ranks have arrived at this rendezvous. The last to arrive runs `on_complete`
  // (under the lock) before releasing the others.
  absl::Status Rendezvous(const char* op, int rank, const std::function<void()>& on_complete);
  absl::Status AllReduceSum(int rank, Tensor inout);
  absl::Status AllGather(int rank, const Tensor& in, Tensor out);
  // Checks that every rank published the same collective; identical answer on every rank.
  absl::Status CheckSlots(const char* op) const;
  void AbortLocked(const absl::Status& reason);

  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Communicator>> communicators_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;          // guarded by mutex_
  uint64_t generation_ = 0;  // guarded by mutex_; bumped when a rendezvous completes
  bool aborted_ = false;     // guarded by mutex_
  absl::Status abort_reason_;  // guarded by mutex_
  // Written by rank r between rendezvous only; read by all after the first rendezvous of a
  // collective and before the second (the rendezvous order the accesses).
  std::vector<Slot> slots_;
  std::vector<float> result_;  // AllReduceSum's reduced values, sized by the last arriver
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_THREAD_COMMUNICATOR_H_
