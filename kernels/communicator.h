// Collective communication between the tensor-parallel ranks of one model.
//
// The forward pass calls these at fixed points (after the row-parallel linears, and to assemble
// vocabulary-parallel logits); with one rank they are no-ops. Implementations: the single-rank
// no-op here; in-process threads (tests, CPU) and NCCL arrive with tensor parallelism.
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
