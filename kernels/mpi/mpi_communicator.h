// Tensor-parallel collectives between processes over MPI (Open MPI's mpirun: one process per
// rank, on one machine or several), for host tensors: the CPU backend's multi-process mode, and
// the control channel (step plans, status agreement) of every multi-process runner.
//
// MPI lifetime: InitMpi() initialises MPI once per process (MPI_Init_thread with
// MPI_THREAD_SERIALIZED: calls may come from different threads, never two at once) and
// registers MPI_Finalize at exit, skipped (with a line on stderr) if an aborted communicator's
// operation is still pending after 2 s: a peer may be gone, and Open MPI's MPI_Finalize
// synchronises with every process. Every MpiCommunicator is a duplicate of
// MPI_COMM_WORLD (MPI_Comm_dup, so its traffic never mixes with another's) with
// MPI_ERRORS_RETURN: an MPI error is a returned absl error, never an abort of the job.
//
// Determinism: AllReduceSum all-gathers every rank's buffer and each rank adds them locally in
// rank order 0..N-1 in fp32 (F16/BF16 are widened, summed, rounded once), exactly what
// ThreadCommunicatorGroup computes: every rank gets bit-identical results, and the sum does not
// depend on timing, the MPI library's reduction algorithm or the network.
//
// Never a hang: every operation is non-blocking MPI, polled until done. One that has not
// completed within `timeout` (a rank died, hangs or never called it) returns DeadlineExceeded
// naming the operation; an MPI error returns Unavailable with MPI's message. Either aborts the
// communicator: the pending request cannot be cancelled (MPI forbids cancelling collectives),
// so its buffers are leaked on purpose (MPI may still write them) and every later call fails
// with Aborted. Ranks must issue the same operations in the same order with the same sizes
// (unlike ThreadCommunicatorGroup, a mismatch is not detected: MPI reports truncation or
// hangs until the timeout).
//
// Thread-safety: one thread at a time per communicator (and per process, for MPI itself);
// Abort() and aborted() from any thread (a poll in progress returns Aborted promptly).
// This header includes no MPI header, so engine code can name the type.
#ifndef BLOSSOM_KERNELS_MPI_MPI_COMMUNICATOR_H_
#define BLOSSOM_KERNELS_MPI_MPI_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/communicator.h"

namespace blossom {

// This process in MPI_COMM_WORLD, and among the processes on its machine.
struct MpiProcess {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the processes sharing this machine (MPI_COMM_TYPE_SHARED)
  int local_size = 1;
};

// Initialises MPI on the first call (later calls return the same answer). Works without
// mpirun too: a world of one process. Internal if MPI cannot provide MPI_THREAD_SERIALIZED.
absl::StatusOr<MpiProcess> InitMpi();

// MPI_Finalize now, unless it ran, InitMpi did not initialise MPI, or an aborted communicator's
// operation is still pending after 2 s (then the process should exit without it). Every process
// must call it; afterwards no MPI call may be made. Optional: the exit handler does the same.
void FinalizeMpi();

struct MpiOptions {
  // Longest one operation may wait for the other ranks before the communicator is aborted.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

class MpiCommunicator : public Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD: collective, every process must call it (InitMpi first if
  // needed).
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(const MpiOptions& options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int world_size() const override;
  // Host F32/F16/BF16 tensors.
  absl::Status AllReduceSum(Tensor inout) override;
  // Host tensors of any dtype; out [world, in.numel()].
  absl::Status AllGather(const Tensor& in, Tensor out) override;

  // `root`'s *bytes replace every other rank's. `timeout` overrides the communicator's;
  // std::chrono::milliseconds::max() waits without limit (a follower idle between steps).
  absl::Status Broadcast(int root, std::string* bytes, std::chrono::milliseconds timeout);
  absl::Status Broadcast(int root, std::string* bytes);
  // Every rank's `mine` -> the first non-OK one in rank order, its message prefixed with the
  // rank ("rank 1 of 2: ...", messages cut at 1000 bytes), identical on every rank; or OK.
  absl::Status AgreeOnStatus(const absl::Status& mine);
  // Same, waiting at most `timeout` instead of the communicator's (work whose length differs
  // between ranks far more than a step's, such as loading the model).
  absl::Status AgreeOnStatus(const absl::Status& mine, std::chrono::milliseconds timeout);

  // Fails the operation in progress (from any thread) and every later one with Aborted.
  void Abort(const absl::Status& reason);
  bool aborted() const;

 private:
  struct Impl;
  explicit MpiCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_MPI_MPI_COMMUNICATOR_H_
