#include "kernels/communicator.h"

#include <cstring>

namespace blossom {

absl::Status SingleRankCommunicator::AllGather(const Tensor& in, Tensor out) {
  if (out.bytes() != in.bytes() || out.device != DeviceKind::kHost) {
    return absl::InvalidArgumentError("AllGather: output must match the input on one host rank");
  }
  if (out.data != in.data) std::memcpy(out.data, in.data, in.bytes());
  return absl::OkStatus();
}

}  // namespace blossom
