// BloomModel's decode steps replayed from captured graphs (EnableStepGraphs).
//
// A graph replays the host-side arguments it was captured with, so a bucket's step is made to
// look the same every time: B = the batch rounded up to a power of two sequences (padding rows:
// token 0, one position of context in block 0, their K/V written nowhere: kPaddingSlot), block
// tables table_width blocks wide, max_context_len = table_width * block_size (the attention
// kernels size their grids from it and skip what a sequence's real context does not reach), and
// the logits of all B rows. Only the packed metadata buffer changes between replays: one copy up
// per step.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/bloom_model.h"
#include "engine/model/bloom_model_internal.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

int32_t BucketFor(int32_t num_seqs) {
  int32_t bucket = 1;
  while (bucket < num_seqs) bucket *= 2;
  return bucket;
}

// Offsets (in int32 elements) of the packed metadata of bucket B; see StepGraphs::metadata.
struct PackedLayout {
  int64_t ids, query_start, context_len, slots, rows, tables, total;
  PackedLayout(int32_t B, int32_t table_width) {
    ids = 0;
    query_start = ids + B;
    context_len = query_start + B + 1;
    slots = context_len + B;
    rows = slots + B;
    tables = rows + B;
    total = tables + static_cast<int64_t>(B) * table_width;
  }
};

// Packs bucket B's inputs (layout PackedLayout(B, W)) from `b`'s decode sequences, the rows past
// them padding: token 0, one position of context in block 0, K/V written nowhere.
void PackInputs(const StepBatch& b, int32_t B, int32_t W, int32_t block_size, int32_t* host) {
  const int32_t S = b.num_seqs();
  const PackedLayout at(B, W);
  std::fill(host, host + at.total, 0);
  for (int32_t s = 0; s < B; ++s) {
    host[at.query_start + s] = s;
    host[at.rows + s] = s;
    if (s >= S) {
      host[at.context_len + s] = 1;
      host[at.slots + s] = kPaddingSlot;
      continue;
    }
    const int32_t* table = b.block_tables.data() + static_cast<int64_t>(s) * b.max_blocks_per_seq;
    std::copy_n(table, std::min(b.max_blocks_per_seq, W),
                host + at.tables + static_cast<int64_t>(s) * W);
    const int32_t pos = b.context_len[s] - 1;
    host[at.ids + s] = b.token_ids[s];
    host[at.context_len + s] = b.context_len[s];
    host[at.slots + s] = table[pos / block_size] * block_size + pos % block_size;
  }
  host[at.query_start + B] = B;
}

}  // namespace

// Views of the packed inputs of bucket B in `buf` (device memory), as one step's inputs: B
// single-token sequences with block tables W wide, attention sized for W blocks of context.
BloomModel::StepInputs BloomModel::InputsOf(const Tensor& buf, int32_t B, int32_t W,
                                            int32_t block_size) {
  const PackedLayout at(B, W);
  auto view = [&](int64_t offset, std::initializer_list<int64_t> shape) {
    return Tensor(static_cast<int32_t*>(buf.data) + offset, DType::kI32, shape, buf.device);
  };
  StepInputs in;
  in.ids = view(at.ids, {B});
  in.logit_rows = view(at.rows, {B});
  in.num_logit_rows = B;
  in.md.num_seqs = B;
  in.md.num_tokens = B;
  in.md.max_query_len = 1;
  in.md.max_context_len = W * block_size;
  in.md.max_blocks_per_seq = W;
  in.md.query_start = view(at.query_start, {B + 1});
  in.md.context_len = view(at.context_len, {B});
  in.md.slot_mapping = view(at.slots, {B});
  in.md.block_tables = view(at.tables, {B, W});
  return in;
}

absl::Status BloomModel::EnableStepGraphs(const StepGraphOptions& options) {
  if (options.max_batch < 1 || options.max_batch > 4096 || options.max_context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("step graphs: max_batch ", options.max_batch,
                                                   " must be in [1, 4096] and max_context ",
                                                   options.max_context, " positive"));
  }
  if (!backend_->SupportsCapture()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step graphs: the ", backend_->name(), " backend cannot capture steps"));
  }
  if (communicator_->world_size() > 1) {
    return absl::FailedPreconditionError(
        "step graphs: not with tensor parallelism yet (collectives are not captured)");
  }
  graphs_ = std::make_unique<StepGraphs>();
  graphs_->options = options;
  graphs_->max_bucket = BucketFor(options.max_batch);
  return absl::OkStatus();
}

StepGraphStats BloomModel::step_graph_stats() const {
  return graphs_ == nullptr ? StepGraphStats() : graphs_->stats;
}

bool BloomModel::GraphEligible(const StepBatch& b, const KvCache& cache) const {
  if (graphs_ == nullptr || graphs_->disabled) return false;
  const int32_t S = b.num_seqs();
  if (S > graphs_->options.max_batch || b.num_tokens() != S ||
      static_cast<int32_t>(b.logit_rows.size()) != S) {
    return false;
  }
  const int32_t block_size = cache.spec().block_size;
  const int64_t table_width = (graphs_->options.max_context + block_size - 1) / block_size;
  for (int32_t s = 0; s < S; ++s) {
    // One token per sequence (num_tokens == S and every sequence has >= 1: ValidateBatch).
    if (b.logit_rows[s] != s || b.context_len[s] > table_width * block_size) return false;
  }
  return true;
}

absl::StatusOr<Tensor> BloomModel::GraphStep(const StepBatch& b, KvCache& cache) {
  return RunBucket(&b, BucketFor(b.num_seqs()), cache);
}

absl::Status BloomModel::WarmUpStepGraphs(KvCache& cache) {
  if (graphs_ == nullptr) return absl::FailedPreconditionError("step graphs are not enabled");
  for (int32_t bucket = 1; bucket <= graphs_->max_bucket && !graphs_->disabled; bucket *= 2) {
    if (graphs_->by_bucket.count(bucket) > 0 && graphs_->cache_id == cache.id()) continue;
    BLOSSOM_RETURN_IF_ERROR(RunBucket(nullptr, bucket, cache).status());
    // Each bucket is packed into the same pinned staging, whose copy up is an asynchronous DMA
    // on a GPU: without this wait the next bucket's packing overwrote it while this bucket's
    // copy was still queued, and this bucket's step read the next one's layout (seen on an H100:
    // a server with 256-sequence graphs failed its warm-up on "attention metadata
    // inconsistent"). A serving step needs no such wait: each ends by waiting for its tokens.
    BLOSSOM_RETURN_IF_ERROR(backend_->Synchronize());
  }
  return absl::OkStatus();
}

absl::Status BloomModel::WarmUpLinearPlans(KvCache& cache, int32_t max_step_tokens,
                                            int32_t max_logit_rows) {
  // Sized for the largest step first, on every backend: a later reallocation would drop the
  // step graphs WarmUpStepGraphs captures next.
  BLOSSOM_RETURN_IF_ERROR(EnsureWorkspace(std::max(1, max_step_tokens), std::max(1, max_logit_rows)));
  if (communicator_->world_size() > 1) return absl::OkStatus();  // see the header
  const int32_t block_size = cache.spec().block_size;
  for (int64_t rows : backend_->WarmUpRowCounts(max_step_tokens)) {
    const int32_t M = static_cast<int32_t>(rows);
    const int32_t R = std::max(1, std::min(M, max_logit_rows));
    BLOSSOM_RETURN_IF_ERROR(EnsureWorkspace(M, R));
    const PackedLayout at(M, 1);
    std::vector<int32_t> host(static_cast<size_t>(at.total));
    PackInputs(StepBatch(), M, 1, block_size, host.data());  // every row padding
    BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor buf, backend_->AllocateTensor(DType::kI32, {at.total}));
    BLOSSOM_RETURN_IF_ERROR(backend_->CopyToDevice(host.data(), buf.tensor));
    StepInputs in = InputsOf(buf.tensor, M, 1, block_size);
    in.num_logit_rows = R;
    in.logit_rows = Tensor(in.logit_rows.data, DType::kI32, {R}, in.logit_rows.device);
    BLOSSOM_RETURN_IF_ERROR(RunOps(in, cache, /*assemble=*/true).status());
    // Before `buf` is freed (and so that a failing kernel is this warm-up's error).
    BLOSSOM_RETURN_IF_ERROR(backend_->Synchronize());
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> BloomModel::RunBucket(const StepBatch* batch, int32_t B, KvCache& cache) {
  const StepBatch placeholder;  // no sequences: every row is padding
  const StepBatch& b = batch != nullptr ? *batch : placeholder;
  StepGraphs& g = *graphs_;
  const int32_t S = b.num_seqs();
  const int32_t block_size = cache.spec().block_size;
  // Sized once for the largest bucket, so that steps of smaller buckets never reallocate (which
  // would drop every graph).
  BLOSSOM_RETURN_IF_ERROR(EnsureWorkspace(g.max_bucket, g.max_bucket));
  Workspace& w = *workspace_;
  if (g.cache_id != cache.id() || g.block_size != block_size ||
      g.workspace_generation != w.generation) {
    g.by_bucket.clear();
    if (g.block_size != block_size) {
      // Both buffers first, then the layout they are sized for: a failed allocation leaves the
      // old layout and buffers together, to be retried by the next step.
      const int32_t table_width = (g.options.max_context + block_size - 1) / block_size;
      const PackedLayout largest(g.max_bucket, table_width);
      BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor metadata,
                               backend_->AllocateTensor(DType::kI32, {largest.total}));
      BLOSSOM_ASSIGN_OR_RETURN(HostBuffer host,
                               backend_->AllocateHostStaging(largest.total * sizeof(int32_t)));
      g.metadata = std::move(metadata);
      g.host = std::move(host);
      g.block_size = block_size;
      g.table_width = table_width;
    }
    g.cache_id = cache.id();
    g.workspace_generation = w.generation;
  }

  const int32_t W = g.table_width;
  const PackedLayout at(B, W);
  // Free to rewrite: the copy from it of the previous step is done, since every step ends with
  // a wait for the device (and WarmUpStepGraphs waits after each bucket).
  int32_t* host = static_cast<int32_t*>(g.host.get());
  PackInputs(b, B, W, block_size, host);
  const Tensor& buf = g.metadata.tensor;
  BLOSSOM_RETURN_IF_ERROR(
      backend_->CopyToDevice(host, Tensor(buf.data, DType::kI32, {at.total}, buf.device)));
  const StepInputs in = InputsOf(buf, B, W, block_size);
  auto first_rows = [&](const Tensor& logits) {
    return Tensor(logits.data, DType::kF32, {S, config_.vocab_size}, logits.device);
  };

  auto found = g.by_bucket.find(B);
  if (found != g.by_bucket.end()) {
    BLOSSOM_RETURN_IF_ERROR(found->second->Replay());
    ++g.stats.replayed;
    return first_rows(w.logits_local.tensor);
  }
  // The bucket's first step runs uncaptured (it also sizes the backend's scratch buffers for
  // the capture), then the same ops are captured for the next steps.
  BLOSSOM_ASSIGN_OR_RETURN(Tensor logits, RunOps(in, cache, /*assemble=*/true));
  BLOSSOM_RETURN_IF_ERROR(backend_->BeginCapture());
  const absl::StatusOr<Tensor> captured_ops = RunOps(in, cache, /*assemble=*/true);
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend_->EndCapture();
  if (!captured_ops.ok() || !graph.ok()) {
    const absl::Status why = captured_ops.ok() ? graph.status() : captured_ops.status();
    spdlog::warn(
        "step graphs: capturing the decode step of bucket {} failed ({}); every step runs "
        "uncaptured from now on",
        B, why.ToString());
    ++g.stats.failed;
    g.disabled = true;
    g.by_bucket.clear();
    return first_rows(logits);
  }
  g.by_bucket.emplace(B, std::move(*graph));
  ++g.stats.captured;
  return first_rows(logits);
}

}  // namespace blossom
