// Step 1 of the sampler's order on the device (engine/sampling/logit_edits.h builds the edits and
// is the CPU twin, ApplyLogitEdits): the allow bitmask and the bans set logits to -inf, then the
// biases are added (-inf stays -inf). One block per row; a row without edits returns at once.
// The mask pass reads one 64-bit word per 64 ids (a warp shares it) and reads and overwrites only
// masked ids, coalesced; a NaN or +inf it overwrites is flagged for the row (nonfinite_rows), so
// that the row still fails as on the host. A barrier orders the masks before the biases, which
// may name a masked id.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sampling_launch.h"

namespace blossom {
namespace cuda {
namespace {

constexpr int kEditThreads = 256;

__global__ void __launch_bounds__(kEditThreads) LogitEditKernel(SamplingLaunchArgs a) {
  const int32_t r = blockIdx.x;
  const int64_t offset = a.allowed_offset[r];
  const int32_t banned_begin = a.banned_start[r], banned_end = a.banned_start[r + 1];
  const int32_t bias_begin = a.bias_start[r], bias_end = a.bias_start[r + 1];
  if (offset < 0 && banned_begin == banned_end && bias_begin == bias_end) {  // the whole block
    if (threadIdx.x == 0) a.nonfinite_rows[r] = 0;
    return;
  }
  float* l = a.logits + static_cast<int64_t>(r) * a.vocab;
  bool bad = false;
  if (offset >= 0) {
    const uint64_t* words = a.allowed_words + offset;
    for (int64_t i = threadIdx.x; i < a.vocab; i += blockDim.x) {
      if (((words[i >> 6] >> (i & 63)) & 1u) == 0) {
        bad |= NonFinite(l[i]);
        l[i] = -INFINITY;
      }
    }
  }
  for (int32_t i = banned_begin + threadIdx.x; i < banned_end; i += blockDim.x) {
    bad |= NonFinite(l[a.banned_tokens[i]]);
    l[a.banned_tokens[i]] = -INFINITY;
  }
  // Orders the masks before the biases (which may name a masked id), and gathers the flag.
  bad = __syncthreads_or(bad) != 0;
  if (threadIdx.x == 0) a.nonfinite_rows[r] = bad ? 1 : 0;
  for (int32_t i = bias_begin + threadIdx.x; i < bias_end; i += blockDim.x) {
    l[a.bias[i].token] += a.bias[i].bias;  // distinct tokens: one writer each
  }
}

}  // namespace

cudaError_t LaunchLogitEdits(const SamplingLaunchArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || !a.any_edits) return cudaSuccess;
  LogitEditKernel<<<a.rows, kEditThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace blossom
