#ifndef BLOSSOM_ENGINE_MODEL_MULTI_RANK_RUNNER_H_
#define BLOSSOM_ENGINE_MODEL_MULTI_RANK_RUNNER_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/checkpoint.h"
#include "engine/model/model_runner.h"
#include "engine/model/rank_group.h"
#include "kernels/backend.h"

namespace blossom {

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(int rank)>;
using GroupFactory =
    std::function<absl::StatusOr<std::unique_ptr<RankGroup>>(const std::vector<Backend*>&)>;

// tp > 1 in one process (launcher "threads"): a thread per rank, each owning its backend
// (make_backend(rank), called on that thread), model slice and KV cache; the ranks reach each
// other through make_group's RankGroup. `checkpoint` is the mapping shared by every rank,
// prefetched already (so `load.prefetch` should be false); `open_seconds` is added to the load
// time; every rank loads its slice with `load`.
absl::StatusOr<std::unique_ptr<ModelRunner>> CreateMultiRankRunner(
    int world, double gpu_memory_fraction, std::shared_ptr<const Checkpoint> checkpoint,
    double open_seconds, const BackendFactory& make_backend, const GroupFactory& make_group,
    const ModelLoadOptions& load);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_MULTI_RANK_RUNNER_H_
