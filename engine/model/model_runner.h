// Runs the BLOOM forward on every tensor-parallel rank: what the engine and the offline generator
// drive, so the scheduler runs once and every rank executes the same step plan.
//
// With tensor_parallel_size 1 the runner is a thin wrapper over one BloomModel, its Backend and
// its KV cache, and Forward runs on the caller's thread. With tp > 1 (CPU backend) it starts one
// thread per rank; each rank thread owns its Backend (a CpuBackend with threads_per_rank
// threads), its communicator (one in-process ThreadCommunicatorGroup for all ranks), its
// BloomModel slice and its KV cache, and only ever touches its own. Forward hands the step to
// every rank and waits: the ranks run the same collectives in the same order, rank 0's full
// logits are returned. If any rank fails, the group is aborted so no other rank waits forever on
// a collective, and the step returns the first rank's error (the one that caused the abort); the
// group is re-armed afterwards, once every rank has returned, so the next step can run.
//
// Thread-safety: config(), info(), world_size() and KvBytesPerBlock() may be called from any
// thread. AllocateKvCache and Forward must be called by one thread at a time (the engine
// thread); the KV cache belongs to one user (an Engine or a BatchGenerator), never two at once.
#ifndef BLOSSOM_ENGINE_MODEL_MODEL_RUNNER_H_
#define BLOSSOM_ENGINE_MODEL_MODEL_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"
#include "engine/model/bloom_model.h"

namespace blossom {

struct ModelRunnerOptions {
  std::string model_dir;
  std::string backend = "cpu";
  int tensor_parallel_size = 1;
  int threads_per_rank = 0;  // 0 = hardware threads / tp
  bool prefetch = true;
};

class ModelRunner {
 public:
  // Loads the model for every rank. InvalidArgument for an unknown backend, a non-positive tp,
  // or a model whose heads do not divide by tp; Unimplemented for "cuda" (not built in yet).
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelRunnerOptions& options);
  // A single-rank runner around an existing model (tests, tools that build their own backend).
  // `model` is not owned and must outlive the runner; the runner owns the KV cache it allocates.
  static std::unique_ptr<ModelRunner> ForModel(BloomModel* model);

  virtual ~ModelRunner();

  virtual const BloomConfig& config() const = 0;
  virtual const ModelInfo& info() const = 0;  // rank 0's info; world_size filled
  virtual int world_size() const = 0;
  virtual size_t KvBytesPerBlock(int32_t block_size) const = 0;  // per rank
  // (Re)allocates the KV cache of every rank; any previous cache (and its contents) is dropped.
  virtual absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) = 0;
  // All ranks run the step; full logits ([logit_rows, vocab]) from rank 0.
  // FailedPrecondition before AllocateKvCache.
  virtual absl::Status Forward(const StepBatch& batch, float* logits) = 0;

  int64_t vocab_size() const { return config().vocab_size; }
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_MODEL_RUNNER_H_
