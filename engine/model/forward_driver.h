// Drives BloomModel::Forward outside the engine, for parity tools and tests: whole prompts as
// one prefill (or in chunks) with every token's logits, and greedy decoding of several prompts
// together. Each sequence gets its own run of KV blocks, scattered (reversed and interleaved) so
// the block-table indirection is really exercised.
//
// Thread-safety: a ForwardDriver uses its model from the calling thread only; one at a time.
#ifndef BLOSSOM_ENGINE_MODEL_FORWARD_DRIVER_H_
#define BLOSSOM_ENGINE_MODEL_FORWARD_DRIVER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/bloom_model.h"

namespace blossom {

// Block tables for `num_seqs` sequences of up to `blocks_per_seq` blocks each.
struct ScatteredBlocks {
  int32_t blocks_per_seq = 0;
  int32_t num_seqs = 0;
  std::vector<int32_t> TableFor(int32_t seq) const;
  int32_t total() const { return blocks_per_seq * num_seqs; }
};

struct GreedyResult {
  std::vector<std::vector<int32_t>> tokens;  // [prompt][step]
  // The logits each token was chosen from, [step][prompt][vocab] flattened: step 0 is the
  // prefill's last row, step s > 0 the decode step that fed token s - 1.
  std::vector<float> step_logits;
};

class ForwardDriver {
 public:
  ForwardDriver(BloomModel* model, int32_t block_size) : model_(model), block_size_(block_size) {}

  // Every token's logits of each sequence ([len, vocab] flattened), the sequences batched
  // together in steps of at most `chunk` tokens each, in `cache` laid out by `blocks`.
  absl::StatusOr<std::vector<std::vector<float>>> Prefill(const std::vector<std::vector<int32_t>>& seqs,
                                                          size_t chunk, KvCache* cache,
                                                          const ScatteredBlocks& blocks);
  // The same in a fresh cache sized for the sequences, all at once.
  absl::StatusOr<std::vector<std::vector<float>>> Prefill(const std::vector<std::vector<int32_t>>& seqs);

  // `new_tokens` greedy tokens per prompt, decoded together (argmax: the lowest id on ties).
  // Step logits are kept only when keep_step_logits (they are vocab floats per prompt and step).
  absl::StatusOr<GreedyResult> Greedy(const std::vector<std::vector<int32_t>>& prompts, int new_tokens,
                                      bool keep_step_logits);

 private:
  BloomModel* model_;
  int32_t block_size_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_FORWARD_DRIVER_H_
