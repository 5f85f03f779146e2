// The MPI communicator's API in a build without MPI (--define=mpi=off, `--config=nompi`): for
// binaries that must start where Open MPI's libraries cannot be loaded (the GPU machine's older
// glibc cannot load Debian 12's libevent, which libmpi needs). Single-process launches never
// call into MPI, so they work unchanged; launcher "mpi" fails at start with a message saying why.
#include "kernels/mpi/mpi_communicator.h"

namespace blossom {
namespace {

absl::Status Disabled() {
  return absl::FailedPreconditionError(
      "this binary was built without MPI (--config=nompi): launcher \"mpi\" is unavailable; "
      "use launcher \"threads\" or a build with MPI");
}

}  // namespace

absl::StatusOr<MpiProcess> InitMpi() { return Disabled(); }
void FinalizeMpi() {}

struct MpiCommunicator::Impl {};

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(const MpiOptions&) { return Disabled(); }
MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiCommunicator::~MpiCommunicator() = default;
int MpiCommunicator::rank() const { return 0; }
int MpiCommunicator::world_size() const { return 1; }
absl::Status MpiCommunicator::AllReduceSum(Tensor) { return Disabled(); }
absl::Status MpiCommunicator::AllGather(const Tensor&, Tensor) { return Disabled(); }
absl::Status MpiCommunicator::Broadcast(int, std::string*) { return Disabled(); }
absl::Status MpiCommunicator::Broadcast(int, std::string*, std::chrono::milliseconds) { return Disabled(); }
absl::Status MpiCommunicator::AgreeOnStatus(const absl::Status&) { return Disabled(); }
void MpiCommunicator::Abort(const absl::Status&) {}
bool MpiCommunicator::aborted() const { return false; }

}  // namespace blossom
