// Collective communication between the tensor-parallel ranks of one model.
//
// The forward pass calls these at fixed points (after the row-parallel linears, and to assemble
// vocabulary-parallel logits); with one rank they are no-ops. Implementations: the single-rank
// no-op here; in-process threads (kernels/cpu), MPI (kernels/mpi) and NCCL (kernels/nccl).
//
// Completion: a collective may return before its result exists, once it is ordered before
// everything the caller issues next on the same device stream (NcclCommunicator's asynchronous
// mode). Fence() waits until every collective issued so far has completed, or fails with the
// error of the one that cannot (a dead peer: DeadlineExceeded; NCCL: Internal). The forward calls
// it once per step before the backend's own end-of-step synchronisation, which could otherwise
// wait forever on a stream stuck in a collective. Communicators whose collectives complete
// before they return (single rank, threads, MPI, NCCL's synchronous mode) keep the no-op default.
//
// Thread-safety: each rank's communicator is used by that rank's engine thread only. Every rank
// must issue the same collectives in the same order.
#ifndef BLOSSOM_KERNELS_COMMUNICATOR_H_
#define BLOSSOM_KERNELS_COMMUNICATOR_H_

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace blossom {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Elementwise sum across ranks, in place. Ranks see bit-identical results.
  virtual absl::Status AllReduceSum(Tensor inout) = 0;
  // out [world_size, in.numel()] = every rank's `in`, in rank order.
  virtual absl::Status AllGather(const Tensor& in, Tensor out) = 0;
  // Waits until every collective this rank has issued has completed (see the file comment).
  // Never blocks without a bound. OK at once when nothing is outstanding.
  virtual absl::Status Fence() { return absl::OkStatus(); }
};

// World size 1: nothing to communicate.
class SingleRankCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceSum(Tensor) override { return absl::OkStatus(); }
  absl::Status AllGather(const Tensor& in, Tensor out) override;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_COMMUNICATOR_H_
