#ifndef BLOSSOM_ENGINE_MODEL_MPI_RUNNER_H_
#define BLOSSOM_ENGINE_MODEL_MPI_RUNNER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/model_runner.h"
#include "kernels/mpi/mpi_communicator.h"

namespace blossom {

// Launcher "mpi": this process's rank of `process` (see ModelRunner's class comment for the
// leader / follower protocol). Every process of the job must call it with the same options;
// options were validated by ModelRunner::Create.
absl::StatusOr<std::unique_ptr<ModelRunner>> CreateMpiRunner(const ModelRunnerOptions& options,
                                                             const MpiProcess& process);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_MPI_RUNNER_H_
