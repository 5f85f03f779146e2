// BloomModel's private structures, shared by its two source files: bloom_model.cc (the step)
// and bloom_model_load.cc (loading this rank's weights). Not for other targets.
#ifndef BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_INTERNAL_H_
#define BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_INTERNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

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
  // Counts the times EnsureWorkspace reallocated: a step graph holds the addresses of the
  // generation it was captured with.
  uint64_t generation = 0;
  int32_t token_capacity = 0;
  int32_t logit_row_capacity = 0;
  OwnedTensor hidden, attn_out, ln, qkv, q, ctx, mlp;
  OwnedTensor gathered, gathered_ln, logits_local, logits_gathered;
  // The step's int32 metadata (BloomModel::Step's packed layout) on the device and its host
  // staging (pinned on a GPU), both metadata_capacity ints; grown on demand.
  OwnedTensor metadata;
  HostBuffer metadata_host{nullptr, [](void*) {}};
  int64_t metadata_capacity = 0;
  // Tensor parallelism: the all-gathered slices assembled into [rows, vocab], on the ranks that
  // assemble them (the caller's, usually rank 0 only); grown on demand like the rest.
  OwnedTensor logits_full;
  int32_t logits_full_rows = 0;
};

// The step's inputs once on the device: what RunOps (and a captured step) reads.
struct BloomModel::StepInputs {
  Tensor ids;         // I32 [num_tokens]
  Tensor logit_rows;  // I32 [num_logit_rows]
  int32_t num_logit_rows = 0;
  AttentionMetadata md;
};

// Decode steps captured per batch bucket (EnableStepGraphs). A graph holds the device addresses
// of the workspace generation, the KV cache and the metadata buffer it was captured with: all
// graphs are dropped when any of them changes.
struct BloomModel::StepGraphs {
  StepGraphOptions options;
  int32_t max_bucket = 1;   // options.max_batch rounded up to a power of two
  int32_t block_size = 0;   // of the cache the graphs were captured with
  int32_t table_width = 0;  // KV blocks per sequence a graph's block table holds
  uint64_t cache_id = 0;
  uint64_t workspace_generation = 0;
  // I32, packed per bucket B: ids [B], query_start [B + 1], context_len [B], slot_mapping [B],
  // logit_rows [B], block_tables [B, table_width]; sized for max_bucket.
  OwnedTensor metadata;
  // The same on the host (pinned on a GPU), filled and copied up in one piece per step, after
  // the previous step's wait for the device.
  HostBuffer host{nullptr, [](void*) {}};
  std::map<int32_t, std::unique_ptr<StepGraph>> by_bucket;
  StepGraphStats stats;
  bool disabled = false;  // a capture failed: every step runs uncaptured from then on
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_INTERNAL_H_
