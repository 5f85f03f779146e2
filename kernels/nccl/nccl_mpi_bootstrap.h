// NCCL communicators for one process per GPU, the processes started by MPI (mpirun / srun),
// possibly across machines: rank 0 creates the NCCL unique id and MPI broadcasts it.
//
// Kept apart from nccl_communicator so that only programs that really use MPI need it (Debian:
// apt-get install libopenmpi-dev openmpi-bin).
//
// Thread-safety: call from one thread per process, after MPI_Init (or MPI_Init_thread), with
// every process of MPI_COMM_WORLD calling it.
#ifndef BLOSSOM_KERNELS_NCCL_NCCL_MPI_BOOTSTRAP_H_
#define BLOSSOM_KERNELS_NCCL_NCCL_MPI_BOOTSTRAP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/nccl/nccl_communicator.h"

namespace blossom {

// Rank and world size are those of MPI_COMM_WORLD. `device` < 0 picks the process's rank among
// the processes on its machine (MPI_COMM_TYPE_SHARED) modulo the visible GPUs, the usual one
// process per GPU mapping. If rank 0 cannot create the id, every rank gets its error (no rank is
// left waiting in the broadcast).
absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicatorWithMpi(
    const NcclOptions& options = {}, int device = -1);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_NCCL_NCCL_MPI_BOOTSTRAP_H_
