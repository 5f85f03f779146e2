#include "engine/model/bloom_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/bloom_model_internal.h"
#include "kernels/status_macros.h"

namespace blossom {

void StepBatch::AddSequence(absl::Span<const int32_t> new_tokens, int32_t num_computed,
                            absl::Span<const int32_t> block_table, bool want_logits,
                            bool all_logits) {
  const int32_t first_row = num_tokens();
  token_ids.insert(token_ids.end(), new_tokens.begin(), new_tokens.end());
  query_start.push_back(num_tokens());
  context_len.push_back(num_computed + static_cast<int32_t>(new_tokens.size()));
  const size_t table_begin = block_tables.size();
  block_tables.resize(table_begin + max_blocks_per_seq, 0);
  std::copy_n(block_table.begin(),
              std::min<size_t>(block_table.size(), static_cast<size_t>(max_blocks_per_seq)),
              block_tables.begin() + table_begin);
  if (all_logits) {
    for (int32_t r = first_row; r < num_tokens(); ++r) logit_rows.push_back(r);
  } else if (want_logits && !new_tokens.empty()) {
    logit_rows.push_back(num_tokens() - 1);
  }
}

void StepBatch::Clear() {
  token_ids.clear();
  query_start.assign(1, 0);
  context_len.clear();
  block_tables.clear();
  logit_rows.clear();
}

BloomModel::BloomModel(Backend* backend, Communicator* communicator)
    : backend_(backend), communicator_(communicator), workspace_(new Workspace) {
  if (communicator_ == nullptr) {
    owned_communicator_ = std::make_unique<SingleRankCommunicator>();
    communicator_ = owned_communicator_.get();
  }
}

BloomModel::~BloomModel() = default;

RankSlice SliceForRank(int64_t total, int rank, int world) {
  const int64_t base = total / world, extra = total % world;
  RankSlice slice;
  slice.begin = rank * base + std::min<int64_t>(rank, extra);
  slice.end = slice.begin + base + (rank < extra ? 1 : 0);
  return slice;
}

absl::StatusOr<std::unique_ptr<KvCache>> BloomModel::CreateKvCache(int32_t num_blocks,
                                                                   int32_t block_size) const {
  KvCacheSpec spec;
  spec.num_layers = static_cast<int32_t>(config_.n_layer);
  spec.num_blocks = num_blocks;
  spec.block_size = block_size;
  spec.num_heads = local_heads_;
  spec.head_dim = static_cast<int32_t>(config_.head_dim());
  spec.dtype = info_.kv_cache_dtype;
  return backend_->CreateKvCache(spec);
}

size_t BloomModel::KvBytesPerBlock(int32_t block_size) const {
  KvCacheSpec spec;
  spec.num_layers = static_cast<int32_t>(config_.n_layer);
  spec.block_size = block_size;
  spec.num_heads = local_heads_;
  spec.head_dim = static_cast<int32_t>(config_.head_dim());
  spec.dtype = info_.kv_cache_dtype;
  return spec.BytesPerBlock();
}

namespace {

struct BufferSpec {
  OwnedTensor* out;
  DType dtype;
  int64_t cols;
};

// Grows `specs` to at least `needed` rows, all or nothing: twice `capacity` (amortised growth),
// or, if that does not fit, exactly `needed`; the buffers are replaced only once every new one
// is allocated, so a failure leaves the old ones, `capacity` and `generation` as they were
// (step graphs captured on the old buffers stay valid). The generation moves with the
// replacement: graphs that hold the old addresses are dropped before they replay.
absl::Status GrowAll(Backend* backend, int32_t needed, int32_t* capacity, uint64_t* generation,
                     const std::vector<BufferSpec>& specs) {
  if (needed <= *capacity) return absl::OkStatus();
  absl::Status failed;
  for (const int64_t rows : {std::max<int64_t>(needed, 2 * static_cast<int64_t>(*capacity)),
                             static_cast<int64_t>(needed)}) {
    std::vector<OwnedTensor> fresh;
    fresh.reserve(specs.size());
    for (const BufferSpec& s : specs) {
      absl::StatusOr<OwnedTensor> buf = backend->AllocateTensor(s.dtype, {rows, s.cols});
      if (!buf.ok()) {
        failed = buf.status();
        break;
      }
      fresh.push_back(std::move(*buf));
    }
    if (fresh.size() < specs.size()) continue;  // freed here; then the exact size, once
    for (size_t i = 0; i < specs.size(); ++i) *specs[i].out = std::move(fresh[i]);
    *capacity = static_cast<int32_t>(rows);
    ++*generation;
    return absl::OkStatus();
  }
  return failed;
}

}  // namespace

absl::Status BloomModel::EnsureWorkspace(int32_t num_tokens, int32_t num_logit_rows) {
  Workspace& w = *workspace_;
  const DType act = backend_->activation_dtype(info_.weight_dtype);
  const int64_t h = config_.hidden_size, d = config_.head_dim(), heads = local_heads_;
  const int world = communicator_->world_size();
  BLOSSOM_RETURN_IF_ERROR(GrowAll(
      backend_, num_tokens, &w.token_capacity, &w.generation,
      {{&w.hidden, act, h}, {&w.attn_out, act, h}, {&w.ln, act, h},
       {&w.qkv, act, heads * 3 * d}, {&w.q, act, heads * d}, {&w.ctx, act, heads * d},
       {&w.mlp, act, config_.ffn_hidden_size() / world}}));
  std::vector<BufferSpec> logit_buffers = {
      {&w.gathered, act, h}, {&w.gathered_ln, act, h}, {&w.logits_local, DType::kF32, vocab_local_max_}};
  // Only a tensor-parallel step gathers the ranks' slices (at world 1 it would be a second copy
  // of the logits, 1 MB a row, never read).
  if (world > 1) logit_buffers.push_back({&w.logits_gathered, DType::kF32, vocab_local_max_ * world});
  return GrowAll(backend_, num_logit_rows, &w.logit_row_capacity, &w.generation, logit_buffers);
}

absl::Status BloomModel::ValidateBatch(const StepBatch& b, const KvCache& cache) const {
  const int32_t num_seqs = b.num_seqs(), num_tokens = b.num_tokens();
  if (num_tokens == 0) return absl::InvalidArgumentError("step has no tokens");
  if (static_cast<int32_t>(b.query_start.size()) != num_seqs + 1 || b.query_start[0] != 0 ||
      b.query_start.back() != num_tokens) {
    return absl::InvalidArgumentError("step: query_start does not cover the tokens");
  }
  if (static_cast<int64_t>(b.block_tables.size()) !=
      static_cast<int64_t>(num_seqs) * b.max_blocks_per_seq) {
    return absl::InvalidArgumentError("step: block_tables size != num_seqs * max_blocks_per_seq");
  }
  const KvCacheSpec& spec = cache.spec();
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t n = b.query_start[s + 1] - b.query_start[s];
    if (n <= 0 || b.context_len[s] < n) {
      return absl::InvalidArgumentError(absl::StrCat("step: sequence ", s, " has ", n,
                                                     " new tokens and context ", b.context_len[s]));
    }
    const int64_t blocks_needed = (b.context_len[s] + spec.block_size - 1) / spec.block_size;
    if (blocks_needed > b.max_blocks_per_seq) {
      return absl::InvalidArgumentError(
          absl::StrCat("step: sequence ", s, " needs ", blocks_needed, " KV blocks but its table has ",
                       b.max_blocks_per_seq));
    }
    for (int64_t i = 0; i < blocks_needed; ++i) {
      const int32_t block = b.block_tables[static_cast<int64_t>(s) * b.max_blocks_per_seq + i];
      if (block < 0 || block >= spec.num_blocks) {
        return absl::InvalidArgumentError(
            absl::StrCat("step: sequence ", s, " uses KV block ", block, " outside the pool of ",
                         spec.num_blocks));
      }
    }
  }
  for (int32_t id : b.token_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || r >= num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("step: logit row ", r, " out of range"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> BloomModel::ForwardKeepLogits(const StepBatch& batch, KvCache& cache) {
  BLOSSOM_ASSIGN_OR_RETURN(Tensor logits, Step(batch, cache, /*assemble=*/true));
  // The fence first: it is bounded, the backend's wait is not (a collective stuck on a dead peer).
  BLOSSOM_RETURN_IF_ERROR(communicator_->Fence());
  // The caller samples on the same stream, but the step's device errors (bad indices found by
  // the kernels) belong to the step, and the step's time should be the step's.
  BLOSSOM_RETURN_IF_ERROR(backend_->Synchronize());
  return logits;
}

absl::Status BloomModel::Forward(const StepBatch& batch, KvCache& cache, float* logits) {
  BLOSSOM_ASSIGN_OR_RETURN(Tensor kept, Step(batch, cache, /*assemble=*/logits != nullptr));
  // Every rank, before any backend wait (see ForwardKeepLogits); no collective outlives a step.
  BLOSSOM_RETURN_IF_ERROR(communicator_->Fence());
  if (logits == nullptr) {
    // No logits wanted; wait anyway, so the step's device errors are this step's on every rank.
    return backend_->Synchronize();
  }
  // No rows to copy: still wait, as every step does. The next step packs its metadata into the
  // same pinned staging, which this step's copy up may still be reading on a GPU.
  if (kept.dim(0) == 0) return backend_->Synchronize();
  return backend_->CopyToHost(kept, logits);  // waits for the backend
}

absl::StatusOr<Tensor> BloomModel::Step(const StepBatch& b, KvCache& cache, bool assemble) {
  BLOSSOM_RETURN_IF_ERROR(ValidateBatch(b, cache));
  if (GraphEligible(b, cache)) return GraphStep(b, cache);
  const int32_t T = b.num_tokens(), S = b.num_seqs();
  const int32_t R = static_cast<int32_t>(b.logit_rows.size());
  BLOSSOM_RETURN_IF_ERROR(EnsureWorkspace(T, std::max(R, 1)));
  Workspace& w = *workspace_;
  const int world = communicator_->world_size();
  const int32_t block_size = cache.spec().block_size;

  // The step's int32 metadata, packed on the host (pinned staging on a GPU) and copied up in one
  // piece: ids [T], query_start [S + 1], context_len [S], slot_mapping [T], logit_rows [R],
  // block_tables [S, max_blocks_per_seq]. The staging is rewritten only here, after the previous
  // step's wait for the device (every step ends with one).
  const int64_t W = b.max_blocks_per_seq;
  const int64_t at_ids = 0, at_qs = at_ids + T, at_cl = at_qs + S + 1, at_slots = at_cl + S,
                at_rows = at_slots + T, at_tables = at_rows + R, total = at_tables + S * W;
  if (total > w.metadata_capacity) {
    // Grown (and the old buffers freed, which may wait for the device) before any collective.
    const int64_t capacity = std::max<int64_t>(total, 2 * w.metadata_capacity);
    BLOSSOM_ASSIGN_OR_RETURN(w.metadata, backend_->AllocateTensor(DType::kI32, {capacity}));
    BLOSSOM_ASSIGN_OR_RETURN(w.metadata_host,
                             backend_->AllocateHostStaging(capacity * sizeof(int32_t)));
    w.metadata_capacity = capacity;
  }
  int32_t* host = static_cast<int32_t*>(w.metadata_host.get());
  std::copy(b.token_ids.begin(), b.token_ids.end(), host + at_ids);
  std::copy(b.query_start.begin(), b.query_start.end(), host + at_qs);
  std::copy(b.context_len.begin(), b.context_len.end(), host + at_cl);
  std::copy(b.logit_rows.begin(), b.logit_rows.end(), host + at_rows);
  std::copy(b.block_tables.begin(), b.block_tables.end(), host + at_tables);
  int32_t max_query = 0, max_context = 0;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t begin = b.query_start[s], end = b.query_start[s + 1];
    const int32_t first_pos = b.context_len[s] - (end - begin);
    const int32_t* table = b.block_tables.data() + static_cast<int64_t>(s) * W;
    for (int32_t t = begin; t < end; ++t) {
      const int32_t pos = first_pos + (t - begin);
      host[at_slots + t] = table[pos / block_size] * block_size + pos % block_size;
    }
    max_query = std::max(max_query, end - begin);
    max_context = std::max(max_context, b.context_len[s]);
  }
  const Tensor& buf = w.metadata.tensor;
  BLOSSOM_RETURN_IF_ERROR(
      backend_->CopyToDevice(host, Tensor(buf.data, DType::kI32, {total}, buf.device)));
  auto view = [&](int64_t offset, std::initializer_list<int64_t> shape) {
    return Tensor(static_cast<int32_t*>(buf.data) + offset, DType::kI32, shape, buf.device);
  };
  StepInputs in;
  in.ids = view(at_ids, {T});
  in.logit_rows = view(at_rows, {R});
  in.num_logit_rows = R;
  in.md.num_seqs = S;
  in.md.num_tokens = T;
  in.md.max_query_len = max_query;
  in.md.max_context_len = max_context;
  in.md.max_blocks_per_seq = b.max_blocks_per_seq;
  in.md.query_start = view(at_qs, {S + 1});
  in.md.context_len = view(at_cl, {S});
  in.md.slot_mapping = view(at_slots, {T});
  in.md.block_tables = view(at_tables, {S, W});
  // Like the metadata buffers, grown before the first collective: freeing may wait for the device.
  if (assemble && world > 1 && R > w.logits_full_rows) {
    const int64_t r = std::max<int64_t>(R, 2 * static_cast<int64_t>(w.logits_full_rows));
    BLOSSOM_ASSIGN_OR_RETURN(w.logits_full,
                             backend_->AllocateTensor(DType::kF32, {r, config_.vocab_size}));
    w.logits_full_rows = static_cast<int32_t>(r);
  }
  return RunOps(in, cache, assemble);
}

absl::StatusOr<Tensor> BloomModel::RunOps(const StepInputs& in, KvCache& cache, bool assemble) {
  const AttentionMetadata& md = in.md;
  const int32_t T = md.num_tokens, R = in.num_logit_rows;
  Workspace& w = *workspace_;
  const int64_t H = config_.hidden_size, d = config_.head_dim(), heads = local_heads_;
  const int world = communicator_->world_size();
  const float eps = static_cast<float>(config_.layer_norm_epsilon);
  const Tensor* ids = &in.ids;
  const Tensor* rows = &in.logit_rows;

  auto rows_of = [&](const OwnedTensor& o, int64_t cols) {
    return Tensor(o.tensor.data, o.tensor.dtype, {T, cols}, o.tensor.device);
  };
  Tensor hidden = rows_of(w.hidden, H), other = rows_of(w.attn_out, H), ln = rows_of(w.ln, H);
  Tensor qkv = rows_of(w.qkv, heads * 3 * d), q = rows_of(w.q, heads * d),
         ctx = rows_of(w.ctx, heads * d),
         mlp = rows_of(w.mlp, config_.ffn_hidden_size() / world);
  const Tensor none;

  // Embedding (vocabulary parallel: each rank fills its rows, zeros elsewhere, then sum).
  BLOSSOM_RETURN_IF_ERROR(backend_->Embedding(word_embeddings_, *ids, vocab_begin_, other));
  if (world > 1) BLOSSOM_RETURN_IF_ERROR(communicator_->AllReduceSum(other));
  BLOSSOM_RETURN_IF_ERROR(backend_->LayerNorm(other, emb_ln_gamma_, emb_ln_beta_, eps, none, hidden));

  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const bool post_ln_residual = config_.apply_residual_connection_post_layernorm;
  // With one rank (no all-reduce between a projection and its residual add) and the residual
  // taken before the LayerNorm (BLOOM's default), each residual add goes into the LayerNorm that
  // follows it: LayerNorm's residual form adds the projection into `hidden` in place and
  // normalises the stored sum, the same values as AddBiasResidual then LayerNorm, one kernel
  // fewer (two per layer). `mlp_pending`: `other` holds the last MLP output, not yet in `hidden`.
  const bool fuse_residual = world == 1 && !post_ln_residual;
  bool mlp_pending = false;
  for (int32_t i = 0; i < static_cast<int32_t>(layers_.size()); ++i) {
    const LayerWeights& L = layers_[i];
    // With the previous MLP output pending: hidden += other, then ln = LN(hidden).
    BLOSSOM_RETURN_IF_ERROR(backend_->LayerNorm(mlp_pending ? other : hidden, L.input_ln_gamma, L.input_ln_beta,
                                                eps, mlp_pending ? hidden : none, ln));
    mlp_pending = false;
    BLOSSOM_RETURN_IF_ERROR(backend_->Linear(ln, L.qkv_weight, L.qkv_bias, Activation::kNone, qkv));
    BLOSSOM_RETURN_IF_ERROR(backend_->SplitQkvWriteCache(qkv, md, i, cache, q));
    BLOSSOM_RETURN_IF_ERROR(backend_->Attention(q, md, i, cache, slopes_.tensor, scale, ctx));
    if (fuse_residual) {
      BLOSSOM_RETURN_IF_ERROR(backend_->Linear(ctx, L.dense_weight, L.dense_bias, Activation::kNone, other));
      // hidden = h1 = attention output + residual; ln = LN(h1).
      BLOSSOM_RETURN_IF_ERROR(backend_->LayerNorm(other, L.post_ln_gamma, L.post_ln_beta, eps, hidden, ln));
      BLOSSOM_RETURN_IF_ERROR(backend_->Linear(ln, L.fc1_weight, L.fc1_bias, Activation::kBloomGelu, mlp));
      BLOSSOM_RETURN_IF_ERROR(backend_->Linear(mlp, L.fc2_weight, L.fc2_bias, Activation::kNone, other));
      mlp_pending = true;
      continue;
    }
    const Tensor& residual1 = post_ln_residual ? ln : hidden;
    if (world == 1) {
      BLOSSOM_RETURN_IF_ERROR(backend_->Linear(ctx, L.dense_weight, L.dense_bias, Activation::kNone, other));
      BLOSSOM_RETURN_IF_ERROR(backend_->AddBiasResidual(other, none, residual1));
    } else {
      BLOSSOM_RETURN_IF_ERROR(backend_->Linear(ctx, L.dense_weight, none, Activation::kNone, other));
      BLOSSOM_RETURN_IF_ERROR(communicator_->AllReduceSum(other));
      BLOSSOM_RETURN_IF_ERROR(backend_->AddBiasResidual(other, L.dense_bias, residual1));
    }
    std::swap(hidden, other);  // hidden = h1 = attention output + residual
    BLOSSOM_RETURN_IF_ERROR(backend_->LayerNorm(hidden, L.post_ln_gamma, L.post_ln_beta, eps, none, ln));
    const Tensor& residual2 = post_ln_residual ? ln : hidden;
    BLOSSOM_RETURN_IF_ERROR(backend_->Linear(ln, L.fc1_weight, L.fc1_bias, Activation::kBloomGelu, mlp));
    if (world == 1) {
      BLOSSOM_RETURN_IF_ERROR(backend_->Linear(mlp, L.fc2_weight, L.fc2_bias, Activation::kNone, other));
      BLOSSOM_RETURN_IF_ERROR(backend_->AddBiasResidual(other, none, residual2));
    } else {
      BLOSSOM_RETURN_IF_ERROR(backend_->Linear(mlp, L.fc2_weight, none, Activation::kNone, other));
      BLOSSOM_RETURN_IF_ERROR(communicator_->AllReduceSum(other));
      BLOSSOM_RETURN_IF_ERROR(backend_->AddBiasResidual(other, L.fc2_bias, residual2));
    }
    std::swap(hidden, other);
  }
  // The last layer's MLP output into the residual stream (hidden + other: the same sum as above).
  if (mlp_pending) BLOSSOM_RETURN_IF_ERROR(backend_->AddBiasResidual(hidden, none, other));
  if (R == 0) {
    if (!assemble) return Tensor();
    return Tensor(w.logits_local.tensor.data, DType::kF32, {0, config_.vocab_size},
                  w.logits_local.tensor.device);
  }

  // Final layer norm and the LM head (tied or not), only for the rows whose logits are wanted.
  Tensor gathered(w.gathered.tensor.data, w.gathered.tensor.dtype, {R, H}, w.gathered.tensor.device);
  Tensor gathered_ln(w.gathered_ln.tensor.data, w.gathered_ln.tensor.dtype, {R, H},
                     w.gathered_ln.tensor.device);
  Tensor logits_local(w.logits_local.tensor.data, DType::kF32, {R, vocab_local_},
                      w.logits_local.tensor.device);
  BLOSSOM_RETURN_IF_ERROR(backend_->GatherRows(hidden, *rows, gathered));
  BLOSSOM_RETURN_IF_ERROR(backend_->LayerNorm(gathered, ln_f_gamma_, ln_f_beta_, eps, none, gathered_ln));
  BLOSSOM_RETURN_IF_ERROR(backend_->Linear(gathered_ln, lm_head_, none, Activation::kNone, logits_local));
  if (world == 1) return assemble ? logits_local : Tensor();
  // Ranks hold balanced but possibly unequal vocabulary slices; each sends a buffer of the
  // largest slice's size whose first R * vocab_local_ values are its [R, vocab_local_] logits.
  // [world, R * vocab_local_max_] -> [R, V]
  const int64_t stride = static_cast<int64_t>(R) * vocab_local_max_;
  Tensor send(w.logits_local.tensor.data, DType::kF32, {stride}, w.logits_local.tensor.device);
  Tensor all(w.logits_gathered.tensor.data, DType::kF32, {world, stride},
             w.logits_gathered.tensor.device);
  BLOSSOM_RETURN_IF_ERROR(communicator_->AllGather(send, all));
  if (!assemble) return Tensor();
  // Each rank's [R, slice] block becomes its columns of [R, V], on the device.
  Tensor full(w.logits_full.tensor.data, DType::kF32, {R, config_.vocab_size},
              w.logits_full.tensor.device);
  for (int r = 0; r < world; ++r) {
    const RankSlice slice = SliceForRank(config_.vocab_size, r, world);
    const Tensor part(static_cast<float*>(all.data) + r * stride, DType::kF32, {R, slice.size()},
                      all.device);
    BLOSSOM_RETURN_IF_ERROR(backend_->CopyColumns(part, full, slice.begin));
  }
  return full;
}

}  // namespace blossom
