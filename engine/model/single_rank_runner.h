#ifndef BLOSSOM_ENGINE_MODEL_SINGLE_RANK_RUNNER_H_
#define BLOSSOM_ENGINE_MODEL_SINGLE_RANK_RUNNER_H_

#include <memory>

#include "engine/model/bloom_model.h"
#include "engine/model/model_runner.h"
#include "kernels/backend.h"

namespace blossom {

// One rank, run on the caller's thread (tensor_parallel_size 1, and ModelRunner::ForModel).
// `backend` and `owned_model` may be null (a caller's model); `model` must outlive the runner.
// `extra_load_seconds` is added to the model's load time (Create's open and prefetch).
std::unique_ptr<ModelRunner> MakeSingleRankRunner(std::unique_ptr<Backend> backend,
                                                  std::unique_ptr<BloomModel> owned_model,
                                                  BloomModel* model, double extra_load_seconds,
                                                  double gpu_memory_fraction);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_SINGLE_RANK_RUNNER_H_
