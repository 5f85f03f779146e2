// BloomModel's private structures, shared by its two source files: bloom_model.cc (the step)
// and bloom_model_load.cc (loading this rank's weights). Not for other targets.
#ifndef BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_INTERNAL_H_
#define BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_INTERNAL_H_

#include <cstdint>

#include "engine/model/bloom_model.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace blossom {

struct BloomModel::LayerWeights {
  Tensor input_ln_gamma, input_ln_beta;
  Tensor qkv_weight, qkv_bias;      // column parallel: this rank's heads
  Tensor dense_weight, dense_bias;  // row parallel: bias added once, after the all-reduce
  Tensor post_ln_gamma, post_ln_beta;
  Tensor fc1_weight, fc1_bias;  // dense_h_to_4h, column parallel
  Tensor fc2_weight, fc2_bias;  // dense_4h_to_h, row parallel
};

// Activation buffers for one step, grown on demand and reused.
struct BloomModel::Workspace {
  int32_t token_capacity = 0;
  int32_t logit_row_capacity = 0;
  OwnedTensor hidden, attn_out, ln, qkv, q, ctx, mlp;
  OwnedTensor gathered, gathered_ln, logits_local, logits_gathered;
  OwnedTensor ids, query_start, context_len, block_tables, slot_mapping, logit_rows;
  // Tensor parallelism: the all-gathered slices assembled into [rows, vocab], on the ranks that
  // assemble them (the caller's, usually rank 0 only); grown on demand like the rest.
  OwnedTensor logits_full;
  int32_t logits_full_rows = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_INTERNAL_H_
