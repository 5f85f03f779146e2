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
// Never a hang: communicators are non-blocking (ncclConfig_t.blocking = 0). Every collective is
// enqueued on the communicator's stream and then polled: stream completion, and
// ncclCommGetAsyncError for a failure on any rank (a peer that died, a network error). A
// collective that has not completed within `timeout` (a rank died or never called it) aborts
// the communicator (ncclCommAbort) and returns DeadlineExceeded naming the collective; an
// asynchronous NCCL error aborts it and returns Internal with NCCL's message. After an abort
// every call fails with Aborted; build new communicators to continue.
//
// Collectives are synchronous for the caller: when AllReduceSum returns, the result is in device
// memory and the stream has passed it. Tensors must be device (kCuda) memory on this rank's GPU.
// Determinism: for a fixed world size, topology and NCCL version, NCCL's ring/tree algorithms
// reduce each chunk once in a fixed order and broadcast it, so all ranks see bit-identical sums.
//
// Thread-safety: a communicator is used by its rank's thread; Abort() may be called from any
// thread (it wakes a collective in progress, which then aborts the communicator).
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
  // Longest a collective (or initialisation) may take before the communicator is aborted.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // cudaStream_t to enqueue collectives on, e.g. the rank's backend stream so that collectives
  // are ordered with its kernels. Null: the communicator creates (and owns) its own stream, and
  // the caller must synchronise its own work before a collective.
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
  // same id within options.timeout.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const std::string& unique_id,
                                                                  int rank, int world_size,
                                                                  int device,
                                                                  const NcclOptions& options = {});
  // One communicator per device (rank i on devices[i]) for one process; call from one thread.
  // `options.stream` must be null here (each rank gets its own stream).
  static absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> CreateAll(
      const std::vector<int>& devices, const NcclOptions& options = {});

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int world_size() const override;
  int device() const;
  // The cudaStream_t collectives run on.
  void* stream() const;

  absl::Status AllReduceSum(Tensor inout) override;
  absl::Status AllGather(const Tensor& in, Tensor out) override;

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
