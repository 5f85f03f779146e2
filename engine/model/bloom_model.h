// The BLOOM decoder: weights loaded from a Hugging Face checkpoint onto a Backend, and the
// forward pass over a flattened, paged batch.
//
// One forward call computes a "step": any mix of prompt chunks (prefill) and single decode
// tokens from many sequences, each with its own position and KV block table. That one entry
// point serves offline generation, continuous batching and the golden tests alike.
//
// Tensor parallelism: the model is built for one rank of `communicator` (world size 1 by
// default). Each rank holds whole heads of the QKV and MLP-in projections (column parallel),
// the matching input slices of the attention-out and MLP-out projections (row parallel, bias
// added once after the all-reduce) and a vocabulary slice of the tied embedding / LM head
// (balanced: the first vocab_size % world ranks hold one row more, so any vocabulary size
// works); an untied LM head (tie_word_embeddings: false, its own lm_head.weight) is split the
// same way. Every rank runs the same steps; logits are all-gathered so every rank can see the full
// row. Weights are views of (or, for column slices, copies of) this rank's slices only.
//
// Waiting: a step issues its kernels and collectives without waiting for the device (the
// collectives may be asynchronous, ordered on the backend's stream: NcclCommunicator). It ends
// with the communicator's Fence() and then the backend's Synchronize() (or the copy of the
// logits, which waits too): the fence is bounded and turns a collective a dead peer never joins
// into an error, where the backend's wait would block forever. Nothing in between the first
// collective and the fence waits for the device (the logit rows are uploaded and the logits
// buffer grown before the first collective).
//
// Step graphs (EnableStepGraphs, bloom_model_graphs.cc; tp 1): decode steps padded to a
// power-of-two bucket and replayed from a graph captured once per bucket (a CUDA graph on a GPU);
// WarmUpLinearPlans and WarmUpStepGraphs do the backend's per-shape preparation and the captures
// before serving, on placeholder steps whose rows are all padding.
//
// Thread-safety: Forward is called by one thread at a time (the engine thread). Config and
// metadata accessors are safe from any thread after Load.
#ifndef BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_H_
#define BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/loader/checkpoint.h"
#include "engine/loader/lora_adapter.h"
#include "engine/loader/model_config.h"
#include "kernels/backend.h"
#include "kernels/weight_quant.h"
#include "kernels/communicator.h"

namespace blossom {

// One step's tokens, host side. Sequence s contributes token rows
// [query_start[s], query_start[s+1]) at positions [context_len[s] - n, context_len[s]).
struct StepBatch {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> query_start{0};
  std::vector<int32_t> context_len;
  // [num_seqs * max_blocks_per_seq], padded with 0 past each sequence's blocks.
  std::vector<int32_t> block_tables;
  int32_t max_blocks_per_seq = 0;
  // Token rows whose logits the caller wants, in output order.
  std::vector<int32_t> logit_rows;

  int32_t num_seqs() const { return static_cast<int32_t>(context_len.size()); }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }

  // Appends a sequence: `new_tokens` at positions [num_computed, num_computed + size), whose
  // KV lives in `block_table`. With want_logits, the last new token's row is added to
  // logit_rows; with all_logits, every new token's row is.
  // max_blocks_per_seq must be set before the first call.
  void AddSequence(absl::Span<const int32_t> new_tokens, int32_t num_computed,
                   absl::Span<const int32_t> block_table, bool want_logits,
                   bool all_logits = false);
  void Clear();
};

// OK if `config` can be split over `world_size` tensor-parallel ranks (whole heads per rank);
// otherwise InvalidArgument "n_head N is not divisible by tensor-parallel size W".
absl::Status CheckTensorParallelSplit(const BloomConfig& config, int world_size);

// Rows [begin, end) of a `total`-row dimension that rank `rank` of `world` holds: balanced, the
// first total % world ranks hold one row more.
struct RankSlice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
RankSlice SliceForRank(int64_t total, int rank, int world);

struct ModelLoadOptions {
  // Touch every weight page once at load (with a progress bar on a terminal), so load time is
  // measured honestly and the first request does not pay for page faults.
  bool prefetch = true;
  // Refuse a checkpoint holding tensors the model does not use (otherwise each is logged by
  // name, once, by rank 0).
  bool strict_load = false;
  // Quantize the Linear weights (QKV, attention dense, both MLP layers) at load time
  // (Backend::ImportLinearWeight); the embedding / LM head and the small vectors keep their dtype.
  WeightQuant quantize = WeightQuant::kNone;
  // Also quantize the LM head (with `quantize`). A tied head then gets its own packed copy: the
  // embedding lookup keeps reading the checkpoint's rows.
  bool quantize_lm_head = false;
  // The KV cache's dtype (--kv-cache-dtype); unset: the backend's activation dtype. Load refuses
  // one the backend does not support beside its activations (Backend::SupportsKvCacheDtype): the
  // CPU backend takes bf16 beside its fp32 activations, half the memory per token.
  std::optional<DType> kv_cache_dtype;
  // A PEFT LoRA adapter directory (--lora-adapter) merged into the Linear weights at load, before
  // any quantization (engine/loader/lora_adapter.h); empty: none.
  std::string lora_adapter;
  // The same adapter already loaded (checked against this model's config), shared by the ranks
  // of one process so that it is read once; when set, lora_adapter is not read.
  std::shared_ptr<const LoraAdapter> lora;
};

// Decode steps replayed from captured graphs (BloomModel::EnableStepGraphs).
struct StepGraphOptions {
  // The largest decode batch that runs from a graph. A batch of S sequences is padded to the
  // next power of two (one graph per bucket: 1, 2, 4, ...); padding rows write no KV.
  int32_t max_batch = 256;
  // The longest context (tokens, prompt and output) a graph's attention covers: its grid and
  // block tables are sized for it. A step with a longer context runs uncaptured.
  int32_t max_context = 2048;
};

struct StepGraphStats {
  int64_t captured = 0;  // graphs captured (again after the workspace or the cache changed)
  int64_t replayed = 0;  // steps served by a replay
  int64_t failed = 0;    // captures that failed (graphs are then off for good)
};

struct ModelInfo {
  std::string model_dir;
  std::string backend;
  int rank = 0;
  int world_size = 1;
  // The dtype the model computes in: its word embeddings' (Linear weights stored in another
  // dtype are converted to it at load), from which the backend's activations follow.
  DType weight_dtype = DType::kF32;
  WeightQuant quantize = WeightQuant::kNone;
  bool quantize_lm_head = false;
  DType kv_cache_dtype = DType::kF32;  // what CreateKvCache makes
  std::string lora_adapter;  // the adapter directory merged at load; empty: none
  uint64_t weight_bytes_this_rank = 0;  // as imported (quantized weights count packed)
  double load_seconds = 0.0;
};

class BloomModel {
 public:
  // Loads config.json and the safetensors weights of `model_dir` for rank communicator->rank().
  // `backend` and `communicator` must outlive the model; communicator may be null (one rank).
  static absl::StatusOr<std::unique_ptr<BloomModel>> Load(const std::string& model_dir,
                                                          Backend* backend,
                                                          Communicator* communicator,
                                                          const ModelLoadOptions& options = {});
  // Same, from a checkpoint that is already open (and prefetched if wanted): the ranks of one
  // process share one read-only mapping. The model keeps `checkpoint` alive.
  static absl::StatusOr<std::unique_ptr<BloomModel>> Load(
      std::shared_ptr<const Checkpoint> checkpoint, Backend* backend, Communicator* communicator,
      const ModelLoadOptions& options = {});
  ~BloomModel();

  const BloomConfig& config() const { return config_; }
  const ModelInfo& info() const { return info_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  int32_t local_heads() const { return local_heads_; }
  // The backend the model was loaded onto (where ForwardKeepLogits leaves the logits).
  Backend* backend() const { return backend_; }

  // A KV cache for this rank's heads, in the backend's layout.
  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int32_t num_blocks,
                                                         int32_t block_size) const;
  // Bytes one KV block takes on this rank (for sizing the pool from a memory budget).
  size_t KvBytesPerBlock(int32_t block_size) const;

  // Runs one step. Writes the new tokens' K/V into `cache` and leaves the fp32 logits for
  // batch.logit_rows in this model's backend memory: a [logit_rows.size(), vocab_size] tensor
  // (the full vocabulary, all-gathered under tensor parallelism) that is valid until the next
  // step of this model and is never copied to the host here. On the cpu backend that memory is
  // host memory. The step's device work has completed when it returns (its errors are this
  // step's). With tensor parallelism every rank must run the step (the collectives pair up).
  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch, KvCache& cache);
  // ForwardKeepLogits, then the logits copied into `logits` ([logit_rows.size(), vocab_size],
  // host memory). `logits` may be null on a rank whose caller does not need them: the
  // collectives still run, the full logits are not assembled.
  absl::Status Forward(const StepBatch& batch, KvCache& cache, float* logits);
  // What Forward checks before any op or collective (shapes, token ids, slots and block tables
  // within `cache`): a step it refuses fails the same way on every rank, so a leader can check
  // it before telling the other ranks to run the step.
  absl::Status ValidateBatch(const StepBatch& batch, const KvCache& cache) const;

  // From now on a decode step (every sequence brings one token and wants its logits, in order:
  // what AddSequence(token, n, table, true) builds) of at most options.max_batch sequences with
  // contexts of at most options.max_context tokens runs as the replay of a graph captured for
  // its bucket (Backend::BeginCapture: a CUDA graph on "cuda", a recorded op list on "cpu"). The
  // first step of a bucket runs uncaptured and is then captured; later ones copy their padded
  // inputs up in one piece and replay. The logits are those of the uncaptured step up to the
  // backend's batch invariance (bit-identical on "cpu"). A capture that fails is logged once and
  // every step runs uncaptured from then on. InvalidArgument for options out of range;
  // FailedPrecondition when the backend cannot capture or with tensor parallelism (collectives
  // are not captured yet).
  absl::Status EnableStepGraphs(const StepGraphOptions& options);
  bool step_graphs_enabled() const { return graphs_ != nullptr; }
  // Captures the graph of every bucket not yet captured for `cache`, now: each on a placeholder
  // step whose rows are all padding (it reads block 0, writes no K/V and changes nothing a
  // request can see), so that no request's step pays for a capture. Ends with the backend's
  // Synchronize. FailedPrecondition unless EnableStepGraphs ran; a failing capture turns graphs
  // off as in a step (logged, OK).
  absl::Status WarmUpStepGraphs(KvCache& cache);
  // Sizes the step workspace for steps of up to max_step_tokens tokens and max_logit_rows logit
  // rows (so that serving them never reallocates it, which would drop captured graphs), then
  // runs Linear at every row count the backend asks for (Backend::WarmUpRowCounts) on
  // placeholder steps of padding rows (no K/V written): the CUDA backend makes (and, if it
  // times them, times) each cuBLASLt plan now instead of in a request's step. Call it before
  // WarmUpStepGraphs. The placeholder steps are skipped on a backend with nothing to prepare
  // (CPU) and, for now, with tensor parallelism (the collectives would have to run on every
  // rank).
  absl::Status WarmUpLinearPlans(KvCache& cache, int32_t max_step_tokens, int32_t max_logit_rows);
  StepGraphStats step_graph_stats() const;

 private:
  struct StepInputs;
  struct StepGraphs;
  struct LayerWeights;
  struct Workspace;

  BloomModel(Backend* backend, Communicator* communicator);
  absl::Status LoadWeights(const Checkpoint& checkpoint);
  // The checkpoint tensor `name` with `shape`, refusing non-float dtypes. The view may be
  // misaligned (Misaligned::kAllow): read it only through the Import* paths, which copy those.
  absl::StatusOr<Tensor> GetFloatWeight(const Checkpoint& checkpoint, const std::string& name,
                                        const std::vector<int64_t>& shape) const;
  // What a weight feeds. Only a Linear weight (read by no op but Linear) goes through
  // Backend::ImportLinearWeight, which may return it quantized or repacked in a dtype only Linear
  // accepts; the LayerNorm parameters, biases and an untied embedding table are imported as they
  // are. kEmbeddingAndLinear, the tied embedding table that is also the LM head, goes through
  // Backend::ImportEmbeddingAndLinearWeight. When the backend copied a kLinear or
  // kEmbeddingAndLinear weight, the checkpoint's pages (or the column slice) behind it are given
  // back; kLinearOfViewedTensor (a tied LM head quantized apart from the embedding, which keeps
  // viewing the same rows) keeps them.
  enum class WeightUse { kOther, kLinear, kLinearOfViewedTensor, kEmbeddingAndLinear };
  // Hands a host weight (view or slice) to the backend and accounts for it. `quant` (a Linear
  // weight's only; ModelLoadOptions::quantize) is kNone for the others.
  // `rows_done`: as Backend::HostRowsDone, for the weights whose host rows may be given back.
  absl::StatusOr<Tensor> Import(const Tensor& host, WeightUse use, WeightQuant quant,
                                const Backend::HostRowsDone& rows_done);
  // Rows (columns) [begin, end) of the checkpoint tensor `name` of `shape`, imported. `dtype`:
  // the dtype to import it in, if not the stored one (then converted on a host copy of the
  // slice). A misaligned tensor's slice is imported from an aligned host copy too (ImportCopy).
  absl::StatusOr<Tensor> ImportRows(const Checkpoint& checkpoint, const std::string& name,
                                    std::vector<int64_t> shape, int64_t begin, int64_t end,
                                    WeightUse use, WeightQuant quant,
                                    std::optional<DType> dtype = std::nullopt);
  absl::StatusOr<Tensor> ImportColumns(const Checkpoint& checkpoint, const std::string& name,
                                       std::vector<int64_t> shape, int64_t begin, int64_t end,
                                       WeightUse use, WeightQuant quant,
                                       std::optional<DType> dtype = std::nullopt);
  // Imports a host copy (CopyWeightBlock, as `dtype`) of the block of `mapped` (a view of
  // checkpoint tensor `name`, possibly misaligned), giving the mapped pages back first. The copy
  // is kept in host_slices_ only if the backend imported it in place (the CPU's zero-copy
  // views); otherwise it is freed as soon as the backend has copied it.
  absl::StatusOr<Tensor> ImportCopy(const Checkpoint& checkpoint, const std::string& name,
                                    const Tensor& mapped, int64_t row_begin, int64_t row_end,
                                    int64_t col_begin, int64_t col_end, DType dtype, WeightUse use,
                                    WeightQuant quant);
  // Imports `view`, which lies in `storage`: keeps the storage in host_slices_ only if the backend
  // imported the view in place.
  absl::StatusOr<Tensor> ImportHostBlock(std::vector<char> storage, const Tensor& view,
                                         WeightUse use, WeightQuant quant);
  // The block [row_begin, row_end) x [col_begin, col_end) of the Linear weight `name` with the
  // LoRA adapter's B @ A added (in float32, then rounded once to `dtype`: no second copy when
  // `dtype` is float32), imported as ImportCopy imports.
  absl::StatusOr<Tensor> ImportMerged(const Checkpoint& checkpoint, const std::string& name,
                                      const std::vector<int64_t>& shape, int64_t row_begin,
                                      int64_t row_end, int64_t col_begin, int64_t col_end,
                                      WeightQuant quant, std::optional<DType> dtype);
  absl::Status EnsureWorkspace(int32_t num_tokens, int32_t num_logit_rows);
  // The one step both Forward variants run. With `assemble`, returns the full logits
  // [logit rows, vocab] in the backend's memory; without, an empty tensor (this rank's share of
  // the collectives is all that runs after the LM head).
  absl::StatusOr<Tensor> Step(const StepBatch& batch, KvCache& cache, bool assemble);
  // The ops of a step (layers, LM head, collectives) on inputs already on the device; issues
  // nothing else, so it can be captured.
  absl::StatusOr<Tensor> RunOps(const StepInputs& inputs, KvCache& cache, bool assemble);
  // Whether `batch` (validated) runs from a step graph (EnableStepGraphs).
  bool GraphEligible(const StepBatch& batch, const KvCache& cache) const;
  // Runs an eligible batch from its bucket's graph, capturing it first if needed. Returns its
  // logits [batch rows, vocab].
  absl::StatusOr<Tensor> GraphStep(const StepBatch& batch, KvCache& cache);
  // Bucket `bucket`'s step on `batch`'s sequences (null: none, every row padding): the packed
  // inputs copied up, then the graph replayed, or the step run uncaptured and captured.
  absl::StatusOr<Tensor> RunBucket(const StepBatch* batch, int32_t bucket, KvCache& cache);
  // Views of bucket B's packed inputs in `buf` (bloom_model_graphs.cc).
  static StepInputs InputsOf(const Tensor& buf, int32_t B, int32_t W, int32_t block_size);

  Backend* backend_;
  Communicator* communicator_;
  std::unique_ptr<Communicator> owned_communicator_;
  BloomConfig config_;
  ModelInfo info_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps the weight mappings alive
  int32_t local_heads_ = 0;
  int64_t vocab_begin_ = 0, vocab_local_ = 0;
  int64_t vocab_local_max_ = 0;  // the largest rank's slice: the AllGather stride

  Tensor word_embeddings_, emb_ln_gamma_, emb_ln_beta_, ln_f_gamma_, ln_f_beta_;
  Tensor lm_head_;  // this rank's vocabulary rows: word_embeddings_ when tied
  std::vector<LayerWeights> layers_;
  std::vector<OwnedTensor> owned_weights_;        // device copies (non-zero-copy backends)
  // Host copies the backend views in place: row-parallel column slices, and slices of
  // misaligned or converted tensors (ImportCopy).
  std::vector<std::vector<char>> host_slices_;
  OwnedTensor slopes_;                            // this rank's ALiBi slopes, F32
  std::shared_ptr<const LoraAdapter> lora_;       // during LoadWeights only
  std::unique_ptr<Workspace> workspace_;
  std::unique_ptr<StepGraphs> graphs_;  // null until EnableStepGraphs
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_BLOOM_MODEL_H_
