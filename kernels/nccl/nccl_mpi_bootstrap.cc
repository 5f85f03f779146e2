#include "kernels/nccl/nccl_mpi_bootstrap.h"

#include <mpi.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "cuda_runtime.h"

namespace blossom {
namespace {

absl::Status MpiError(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(absl::StrCat(what, ": ", std::string(text, length)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicatorWithMpi(
    const NcclOptions& options, int device) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return absl::FailedPreconditionError("MPI_Init has not been called");
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // Byte 0 says whether rank 0 has an id; then the id (or rank 0's error message).
  std::string message(1 + NcclCommunicator::kUniqueIdBytes, '\0');
  if (rank == 0) {
    absl::StatusOr<std::string> id = NcclCommunicator::NewUniqueId();
    if (id.ok()) {
      message[0] = 1;
      message.replace(1, id->size(), *id);
    } else {
      message.replace(1, std::string::npos,
                      std::string(id.status().message()).substr(0, message.size() - 1));
      message.resize(1 + NcclCommunicator::kUniqueIdBytes, '\0');
    }
  }
  int code = MPI_Bcast(message.data(), static_cast<int>(message.size()), MPI_BYTE, 0,
                       MPI_COMM_WORLD);
  if (code != MPI_SUCCESS) return MpiError("MPI_Bcast of the NCCL unique id", code);
  if (message[0] != 1) {
    return absl::InternalError(absl::StrCat("rank 0 could not create the NCCL unique id: ",
                                            message.substr(1, message.find('\0', 1) - 1)));
  }
  // Only now, so that a rank without a GPU cannot leave the others waiting in the broadcast:
  // they time out in Create instead.
  if (device < 0) {
    MPI_Comm local;
    int split = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                                    &local);
    if (split != MPI_SUCCESS) return MpiError("MPI_Comm_split_type", split);
    int local_rank = 0;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("MPI rank ", rank, ": no visible CUDA device"));
    }
    device = local_rank % count;
  }
  return NcclCommunicator::Create(message.substr(1), rank, world, device, options);
}

}  // namespace blossom
