// Writes a random-weight BLOOM checkpoint of any shape, laid out exactly like a Hugging Face
// save_pretrained() directory: config.json, model.safetensors (or model-0000i-of-0000n.safetensors
// shards of at most max_shard_bytes each plus model.safetensors.index.json), and the tokenizer
// files copied from a given directory.
//
// Why: benchmarking the real shapes (bloom-560m ... a few layers of the 176B) must not need a
// download. Weights are initialised as Hugging Face does (Linear/Embedding normal(0, 0.02),
// LayerNorm weight 1, biases 0) from a counter-based generator, so a tensor's values depend only
// on (seed, tensor name, element index): the same bytes for any thread count or chunking.
//
// Memory: tensors are generated and written a chunk at a time (streaming), so writing a 7.2 GB
// embedding needs a few MB of buffers, never the whole model.
//
// Thread-safety: free functions without shared state; two calls must not write the same
// directory.
#ifndef BLOSSOM_BENCHMARKS_RANDOM_CHECKPOINT_H_
#define BLOSSOM_BENCHMARKS_RANDOM_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmarks/bloom_shapes.h"
#include "kernels/dtype.h"

namespace blossom {

struct RandomCheckpointOptions {
  BloomShape shape;
  DType dtype = DType::kBF16;  // F32, F16 or BF16
  uint64_t seed = 0;
  double init_std = 0.02;  // Hugging Face's initializer_range for BLOOM
  // Hugging Face's default max_shard_size is 5GB (decimal); one tensor larger than this gets a
  // shard of its own (the 176B embedding is 7.2 GB).
  uint64_t max_shard_bytes = 5000000000ull;
  // Directory holding tokenizer.json (required) and, if present, tokenizer_config.json and
  // special_tokens_map.json; all are copied unchanged.
  std::string tokenizer_dir;
  int threads = 0;  // generator threads; <= 0: all cores
  // Called after each tensor with (bytes written so far, total bytes); may be null.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct RandomCheckpointInfo {
  std::vector<std::string> weight_files;  // file names inside the directory, in order
  uint64_t total_bytes = 0;               // tensor data bytes (metadata.total_size)
  int64_t param_count = 0;
};

// Writes the checkpoint into `out_dir` (created if missing). Refuses (FailedPrecondition) a
// directory that already holds safetensors or an index: a stale model.safetensors next to new
// shards would be loaded instead of them.
absl::StatusOr<RandomCheckpointInfo> WriteRandomCheckpoint(const std::string& out_dir,
                                                           const RandomCheckpointOptions& options);

// config.json text as transformers' save_pretrained writes it for BloomForCausalLM.
std::string BloomConfigJson(const BloomShape& shape, DType dtype, double init_std);

// Groups tensors (by index into `specs`) into shards the way transformers does: in order, a new
// shard starts when adding the next tensor would exceed max_shard_bytes and the current shard is
// not empty.
std::vector<std::vector<size_t>> PlanShards(const std::vector<TensorSpec>& specs, DType dtype,
                                            uint64_t max_shard_bytes);

// Elements [begin, begin + n) of the normal(0, std) stream identified by `key` (Box-Muller over a
// SplitMix64 counter: element 2j and 2j+1 come from counter j). `begin` may be odd.
void FillNormal(uint64_t key, int64_t begin, int64_t n, float std, float* out);

// The stream key of one tensor: a hash of the seed and the tensor name.
uint64_t TensorKey(uint64_t seed, const std::string& name);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_RANDOM_CHECKPOINT_H_
