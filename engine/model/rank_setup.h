// What every ModelRunner does for a rank while setting it up: the load and KV-cache log lines,
// the KV allocation error with the pool's geometry, the KV budget from a GPU's memory, and the
// visible-GPU check. Shared by the single-rank, multi-rank (threads) and MPI runners.
//
// The same header in every build; the CUDA parts are compiled where BLOSSOM_HAVE_CUDA is set
// (engine/model/BUILD's RUNNER_CUDA_DEFINES).
#ifndef BLOSSOM_ENGINE_MODEL_RANK_SETUP_H_
#define BLOSSOM_ENGINE_MODEL_RANK_SETUP_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/bloom_model.h"
#include "kernels/backend.h"

namespace blossom {

void LogWeights(const ModelInfo& info);

void LogKv(int rank, int world, int32_t num_blocks, int32_t block_size, size_t per_block);

// The backend's error with the pool's geometry, so "out of memory" says what was asked for.
absl::Status KvAllocationError(const absl::Status& error, int32_t num_blocks, int32_t block_size,
                               size_t per_block);

// KvCacheBytesFromMemory for one rank; call it on the rank's thread (the memory queries set the
// calling thread's current CUDA device to the backend's). `kv_bytes_now`: the rank's current KV
// cache, which AllocateKvCache would free first.
absl::StatusOr<int64_t> KvBudgetOnRank(Backend* backend, const BloomModel& model, int world,
                                       double fraction, int64_t kv_bytes_now);

#ifdef BLOSSOM_HAVE_CUDA
// FailedPrecondition unless `tp` GPUs are visible, with CUDA's reason when none is.
absl::Status CheckVisibleGpus(int tp);
#endif

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_RANK_SETUP_H_
