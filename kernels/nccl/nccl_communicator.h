// Tensor-parallel collectives between GPUs with NCCL.
//
// Two ways to build the ranks:
//  - one process, one thread per GPU: CreateAll(devices) initialises every rank's communicator
//    together (a group of ncclCommInitRankConfig calls, what ncclCommInitAll does, but
//    non-blocking so it can time out); rank i then belongs to the thread that drives GPU i;
//  - one process per GPU (across machines): rank 0 calls NewUniqueId(), the id reaches every
//    process (MPI broadcast: see nccl_mpi_bootstrap.h, or any other channel) and each process
//    calls Create(id, rank, world_size, device). Threads of one process may do the same.
//
// Never a hang: communicators are non-blocking (ncclConfig_t.blocking = 0), and every wait is
// a poll: of the stream (or an event on it), and of ncclCommGetAsyncError for a failure on any
// rank (a peer that died, a network error). A collective that has not completed within `timeout`
// (a rank died or never called it) aborts the communicator (ncclCommAbort) and returns
// DeadlineExceeded naming the collective; an asynchronous NCCL error aborts it and returns
// Internal with NCCL's message. After an abort every call fails with Aborted; build new
// communicators to continue.
//
// Two modes (NcclOptions::synchronous):
//  - synchronous (the default): a collective is enqueued on the communicator's stream and then
//    polled until it completes; when AllReduceSum returns, the result is in device memory and the
//    stream has passed it. One host wait per collective. Fence() has nothing to do.
//  - asynchronous: the communicator enqueues on the caller's stream (options.stream, required:
//    the stream its kernels run on, e.g. CudaBackend::stream()), records an event after the
//    collective and returns: the collective is ordered after the kernels enqueued before it and
//    before those enqueued after it, with no host wait (only the enqueue itself is polled while
//    NCCL reports ncclInProgress). Fence() then waits for the last event with the same timeout and
//    error checks. The caller must Fence() before anything that blocks on the stream
//    (cudaStreamSynchronize, a synchronous copy): that would otherwise wait forever on a
//    collective a dead peer never joins, where Fence() times out and aborts.
//
// Tensors must be device (kCuda) memory on this rank's GPU.
// Determinism: for a fixed world size, topology and NCCL version, NCCL's ring/tree algorithms
// reduce each chunk once in a fixed order and broadcast it, so all ranks see bit-identical sums.
//
// Thread-safety: a communicator is used by its rank's thread; Abort() may be called from any
// thread (it wakes a collective or a Fence() in progress, which then aborts the communicator).
// Invariant (asynchronous mode): the event marks the last collective enqueued; `outstanding`
// counts those enqueued since the last Fence() that completed.
// This header includes no CUDA or NCCL header, so engine code can name the type.
#ifndef BLOSSOM_KERNELS_NCCL_NCCL_COMMUNICATOR_H_
#define BLOSSOM_KERNELS_NCCL_NCCL_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/communicator.h"

namespace blossom {

struct NcclOptions {
  // Longest a collective, an initialisation or a Fence() may take before the communicator is
  // aborted (for a Fence(), counted from its call).
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // true: every collective waits for its own completion. false: collectives are ordered on
  // `stream` and Fence() waits (see the file comment); `stream` must then be set.
  bool synchronous = true;
  // cudaStream_t to enqueue collectives on, e.g. the rank's backend stream so that collectives
  // are ordered with its kernels. Null (synchronous mode only): the communicator creates (and
  // owns) its own stream, and the caller must synchronise its own work before a collective.
  void* stream = nullptr;
};

class NcclCommunicator : public Communicator {
 public:
  // Size of the id every rank of one communicator must share.
  static constexpr size_t kUniqueIdBytes = 128;

  // Rank 0's new id, as kUniqueIdBytes raw bytes. Needs a visible GPU only for NCCL's bootstrap
  // network interface (not for the id itself).
  static absl::StatusOr<std::string> NewUniqueId();
  // Rank `rank` of `world_size` on CUDA device `device`. Every rank must call this with the
  // same id within options.timeout. InvalidArgument for the asynchronous mode without a stream
  // (checked before any CUDA call).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const std::string& unique_id,
                                                                  int rank, int world_size,
                                                                  int device,
                                                                  const NcclOptions& options = {});
  // One communicator per device (rank i on devices[i]) for one process; call from one thread.
  // `options.stream` must be null here. `streams`: empty (each rank creates a stream of its own;
  // synchronous mode only) or one cudaStream_t per device, created on that device, which rank i
  // enqueues on (not owned; it must outlive the communicator). The option checks come before any
  // CUDA call: InvalidArgument without touching a GPU.
  static absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> CreateAll(
      const std::vector<int>& devices, const NcclOptions& options = {},
      const std::vector<void*>& streams = {});

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int world_size() const override;
  int device() const;
  // The cudaStream_t collectives run on.
  void* stream() const;
  bool synchronous() const;

  absl::Status AllReduceSum(Tensor inout) override;
  absl::Status AllGather(const Tensor& in, Tensor out) override;
  // Asynchronous mode: waits (polling, at most options.timeout) until the last collective
  // enqueued has completed on the stream. DeadlineExceeded naming that collective (the
  // communicator is then aborted), Internal for an NCCL or CUDA error, Aborted after Abort().
  // OK at once in synchronous mode or when nothing was enqueued since the last Fence().
  absl::Status Fence() override;

  // Aborts the communicator (ncclCommAbort): a collective in progress on another thread returns
  // Aborted promptly; later calls fail. Safe from any thread.
  void Abort();
  bool aborted() const;

 private:
  struct Impl;
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_NCCL_NCCL_COMMUNICATOR_H_
