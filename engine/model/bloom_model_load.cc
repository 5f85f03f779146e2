// BloomModel: loading this rank's slices of the checkpoint's weights (the step is in
// bloom_model.cc).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/loader/progress_bar.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weight_copy.h"
#include "engine/model/alibi.h"
#include "engine/model/bloom_model.h"
#include "engine/model/bloom_model_internal.h"
#include "engine/model/bloom_tensor_names.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

constexpr char kEmbeddingName[] = "word_embeddings.weight";
constexpr char kLmHeadName[] = "lm_head.weight";

// The checkpoint tensor the model embeds tokens with. Normally word_embeddings.weight; but
// older pytorch -> safetensors conversions of tied checkpoints kept only the alphabetically first
// name of the shared tensor, lm_head.weight. With tied embeddings (config.json's
// tie_word_embeddings, true when absent as in HF) that is the same matrix, so it serves as the
// embedding, as HF's tie_weights makes it. Untied, lm_head.weight is another matrix: the
// embedding is then simply missing (Get's NotFound names it).
std::string EmbeddingTensorName(const Checkpoint& checkpoint) {
  if (!checkpoint.Has(kEmbeddingName) && checkpoint.config().tie_word_embeddings &&
      checkpoint.Has(kLmHeadName)) {
    return kLmHeadName;
  }
  return kEmbeddingName;
}

// The tensor's dtype as stored (nullopt if absent or not a Tensor dtype).
std::optional<DType> StoredDType(const Checkpoint& checkpoint, const std::string& name) {
  const TensorEntry* entry = checkpoint.FindEntry(name);
  return entry == nullptr ? std::nullopt : ViewableDType(entry->dtype_name);
}

// The weights imported in another dtype than they are stored in, and as what.
struct DTypePlan {
  absl::flat_hash_map<std::string, DType> convert;
  std::optional<DType> DTypeFor(const std::string& name) const {
    auto it = convert.find(name);
    return it == convert.end() ? std::nullopt : std::optional<DType>(it->second);
  }
};

// What the kernels accept decides it. Linear takes its input and weight in one dtype on CUDA
// (the CPU's takes any float weight beside its fp32 activations), and the activations follow
// the embedding (`compute`); so a Linear weight stored in another float dtype is converted to
// `compute`, on every backend, so that all of them compute the same model (as HF does when it
// loads a checkpoint into one torch_dtype). Not a quantized one (q, q_head): the backend packs it
// from any float dtype. LayerNorm takes any float weight and bias beside any activations, but on
// CUDA both in one dtype: a pair stored in two dtypes becomes F32, exact for either. Biases may
// be any float dtype on both backends and keep theirs. With `log`, one warning lists the changes.
DTypePlan PlanWeightDTypes(const Checkpoint& checkpoint, DType compute, WeightQuant q,
                           WeightQuant q_head, bool log) {
  const BloomConfig& config = checkpoint.config();
  DTypePlan plan;
  std::vector<std::string> linears, norms;
  auto linear = [&](const std::string& name, WeightQuant quant) {
    const std::optional<DType> stored = StoredDType(checkpoint, name);
    // A missing or non-float tensor is GetFloatWeight's error to report, by name.
    if (quant != WeightQuant::kNone || !stored.has_value() || !IsFloat(*stored) ||
        *stored == compute) {
      return;
    }
    plan.convert[name] = compute;
    linears.push_back(absl::StrCat("'", name, "' ", DTypeName(*stored)));
  };
  auto norm = [&](const std::string& prefix) {
    const std::string weight = prefix + "weight", bias = prefix + "bias";
    const std::optional<DType> w = StoredDType(checkpoint, weight), b = StoredDType(checkpoint, bias);
    if (!w.has_value() || !b.has_value() || !IsFloat(*w) || !IsFloat(*b) || *w == *b) return;
    plan.convert[weight] = plan.convert[bias] = DType::kF32;
    norms.push_back(absl::StrCat("'", weight, "' ", DTypeName(*w), " / 'bias' ", DTypeName(*b)));
  };
  norm("word_embeddings_layernorm.");
  norm("ln_f.");
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const std::string p = absl::StrCat("h.", i, ".");
    norm(p + "input_layernorm.");
    norm(p + "post_attention_layernorm.");
    for (const char* matrix : {"self_attention.query_key_value.weight",
                               "self_attention.dense.weight", "mlp.dense_h_to_4h.weight",
                               "mlp.dense_4h_to_h.weight"}) {
      linear(p + matrix, q);
    }
  }
  if (!config.tie_word_embeddings) linear(kLmHeadName, q_head);
  // The first few by name: a 70-layer checkpoint would otherwise log hundreds.
  auto some = [](const std::vector<std::string>& names) {
    constexpr size_t kShown = 4;
    std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kShown));
    return absl::StrCat(absl::StrJoin(shown, ", "), names.size() > kShown ? ", ..." : "");
  };
  if (log && !linears.empty()) {
    spdlog::warn("{}: {} Linear weight(s) are stored in another dtype than the word embeddings' {}, "
                 "which the model computes in; converted to {} at load: {}",
                 checkpoint.model_dir(), linears.size(), DTypeName(compute), DTypeName(compute),
                 some(linears));
  }
  if (log && !norms.empty()) {
    spdlog::warn("{}: {} LayerNorm(s) store weight and bias in different dtypes; both converted to "
                 "f32 at load: {}",
                 checkpoint.model_dir(), norms.size(), some(norms));
  }
  return plan;
}

}  // namespace

absl::Status CheckTensorParallelSplit(const BloomConfig& config, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel size must be at least 1, got ", world_size));
  }
  if (config.n_head % world_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_head ", config.n_head, " is not divisible by tensor-parallel size ", world_size,
        " (each rank must hold whole heads)"));
  }
  // The MLP width is 4 * hidden = 4 * n_head * head_dim, so it divides whenever n_head does.
  if (config.vocab_size < world_size) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", config.vocab_size,
                                                   " is smaller than tensor-parallel size ",
                                                   world_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BloomModel>> BloomModel::Load(const std::string& model_dir,
                                                             Backend* backend,
                                                             Communicator* communicator,
                                                             const ModelLoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // Refuse a bad split before mapping anything.
  absl::StatusOr<BloomConfig> config = LoadBloomConfig(model_dir);
  if (!config.ok()) return config.status();
  const absl::Status split = CheckTensorParallelSplit(
      *config, communicator == nullptr ? 1 : communicator->world_size());
  if (!split.ok()) return absl::Status(split.code(), absl::StrCat(model_dir, ": ", split.message()));
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(model_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  if (options.prefetch) {
    // Draws only on a terminal and only for large checkpoints (ProgressBar decides).
    ProgressBar bar((*checkpoint)->total_bytes());
    absl::Status s = (*checkpoint)->Prefetch(bar.Callback());
    bar.Finish();
    if (!s.ok()) return s;
  }
  ModelLoadOptions rest = options;
  rest.prefetch = false;
  absl::StatusOr<std::unique_ptr<BloomModel>> model =
      Load(std::shared_ptr<const Checkpoint>(std::move(*checkpoint)), backend, communicator, rest);
  if (model.ok()) {
    (*model)->info_.load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return model;
}

absl::StatusOr<std::unique_ptr<BloomModel>> BloomModel::Load(
    std::shared_ptr<const Checkpoint> checkpoint, Backend* backend, Communicator* communicator,
    const ModelLoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<BloomModel> model(new BloomModel(backend, communicator));
  const std::string& model_dir = checkpoint->model_dir();
  const BloomConfig& config = checkpoint->config();
  model->config_ = config;
  const int world = model->communicator_->world_size();
  const int rank = model->communicator_->rank();
  const absl::Status split = CheckTensorParallelSplit(config, world);
  if (!split.ok()) return absl::Status(split.code(), absl::StrCat(model_dir, ": ", split.message()));
  const std::string embedding_name = EmbeddingTensorName(*checkpoint);
  if (embedding_name != kEmbeddingName && rank == 0) {
    spdlog::warn(
        "{}: the checkpoint has no '{}' but config.json ties the word embeddings to the LM head, "
        "so its '{}' (the same matrix, the one name older conversions kept) is used as the word "
        "embeddings",
        model_dir, kEmbeddingName, kLmHeadName);
  }
  // The model computes in the embedding's dtype: the backend's activations follow from it, so
  // it is fixed before any weight loads (and the KV dtype checked against it); Linear weights
  // stored in another dtype are converted to it (LoadWeights). Not any other tensor's: in a
  // checkpoint with F32 LayerNorm and bias vectors beside F16 matrices, the last one imported
  // would make the activations F32 beside F16 Linear weights.
  absl::StatusOr<Tensor> embedding =
      model->GetFloatWeight(*checkpoint, embedding_name, {config.vocab_size, config.hidden_size});
  if (!embedding.ok()) return embedding.status();
  model->info_.weight_dtype = embedding->dtype;
  const DType activations = backend->activation_dtype(embedding->dtype);
  model->info_.kv_cache_dtype = options.kv_cache_dtype.value_or(activations);
  if (!backend->SupportsKvCacheDtype(model->info_.kv_cache_dtype, activations)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype ", DTypeName(model->info_.kv_cache_dtype), " is not supported by the ",
        backend->name(), " backend beside its ", DTypeName(activations), " activations"));
  }
  if (options.prefetch) {
    ProgressBar bar(checkpoint->total_bytes());
    absl::Status s = checkpoint->Prefetch(bar.Callback());
    bar.Finish();
    if (!s.ok()) return s;
  }
  model->local_heads_ = static_cast<int32_t>(config.n_head / world);
  const RankSlice vocab = SliceForRank(config.vocab_size, rank, world);
  model->vocab_begin_ = vocab.begin;
  model->vocab_local_ = vocab.size();
  model->vocab_local_max_ = SliceForRank(config.vocab_size, 0, world).size();
  absl::Status s = CheckUnexpectedTensors(*checkpoint, options.strict_load, /*log=*/rank == 0);
  if (!s.ok()) return s;
  model->info_.quantize = options.quantize;
  model->info_.quantize_lm_head = options.quantize_lm_head && options.quantize != WeightQuant::kNone;
  if (options.lora != nullptr) {
    model->lora_ = options.lora;  // loaded once for every rank of the process
  } else if (!options.lora_adapter.empty()) {
    absl::StatusOr<std::unique_ptr<LoraAdapter>> lora =
        LoraAdapter::Load(options.lora_adapter, config);
    if (!lora.ok()) return lora.status();
    model->lora_ = std::move(*lora);
  }
  if (model->lora_ != nullptr) {
    model->info_.lora_adapter = model->lora_->dir();
    if (rank == 0) {
      spdlog::info("LoRA adapter {}: r {}, scale {}, merged into {} Linear weights",
                   model->lora_->dir(), model->lora_->rank(), model->lora_->scale(),
                   model->lora_->changed_weights().size());
    }
  }
  s = model->LoadWeights(*checkpoint);
  model->lora_.reset();  // merged: this rank needs its matrices no more
  if (!s.ok()) return s;
  model->checkpoint_ = std::move(checkpoint);

  std::vector<float> all_slopes = AlibiSlopes(static_cast<int>(config.n_head));
  absl::StatusOr<OwnedTensor> slopes =
      backend->AllocateTensor(DType::kF32, {model->local_heads_});
  if (!slopes.ok()) return slopes.status();
  model->slopes_ = std::move(*slopes);
  s = backend->CopyToDevice(all_slopes.data() + rank * model->local_heads_, model->slopes_.tensor);
  if (!s.ok()) return s;

  model->info_.model_dir = model_dir;
  model->info_.backend = backend->name();
  model->info_.rank = rank;
  model->info_.world_size = world;
  model->info_.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return model;
}

absl::StatusOr<Tensor> BloomModel::GetFloatWeight(const Checkpoint& checkpoint,
                                                  const std::string& name,
                                                  const std::vector<int64_t>& shape) const {
  // Misaligned views too: every import path checks IsAlignedView and copies those (ImportRows,
  // ImportCopy); nothing else reads a weight's data.
  absl::StatusOr<Tensor> host = checkpoint.Get(name, shape, Misaligned::kAllow);
  if (!host.ok()) return host.status();
  if (!IsFloat(host->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(checkpoint.DescribeLocation(name), ": tensor '",
                                                   name, "' has dtype ", DTypeName(host->dtype),
                                                   "; expected F32, F16 or BF16"));
  }
  return host;
}

absl::StatusOr<Tensor> BloomModel::Import(const Tensor& host, WeightUse use, WeightQuant quant,
                                          const Backend::HostRowsDone& rows_done) {
  const bool linear_only = use == WeightUse::kLinear || use == WeightUse::kLinearOfViewedTensor;
  if (!linear_only && quant != WeightQuant::kNone) {
    return absl::InternalError("bloom: only a Linear weight can be quantized");
  }
  absl::StatusOr<OwnedTensor> imported =
      linear_only ? backend_->ImportLinearWeight(host, quant, rows_done)
      : use == WeightUse::kEmbeddingAndLinear
          ? backend_->ImportEmbeddingAndLinearWeight(host, rows_done)
          : backend_->ImportWeight(host);
  if (!imported.ok()) return imported.status();
  info_.weight_bytes_this_rank += imported->tensor.bytes();
  Tensor t = imported->tensor;
  owned_weights_.push_back(std::move(*imported));
  return t;
}

absl::StatusOr<Tensor> BloomModel::ImportRows(const Checkpoint& checkpoint,
                                              const std::string& name,
                                              std::vector<int64_t> shape, int64_t begin,
                                              int64_t end, WeightUse use, WeightQuant quant,
                                              std::optional<DType> dtype) {
  BLOSSOM_ASSIGN_OR_RETURN(Tensor host, GetFloatWeight(checkpoint, name, shape));
  const Tensor rows = host.Rows(begin, end);
  if (!IsAlignedView(rows) || (dtype.has_value() && *dtype != rows.dtype)) {
    const int64_t width = host.dim(0) > 0 ? host.numel() / host.dim(0) : 0;
    return ImportCopy(checkpoint, name, host, begin, end, 0, width, dtype.value_or(host.dtype), use,
                      quant);
  }
  // A weight nothing else views: once the backend has copied rows of it (a CPU with AVX-512
  // copies every Linear weight, weight_pairs.h; --quantize does; a GPU backend uploads), their
  // mapped pages would only sit next to the copy. Given back slice by slice as the backend goes
  // (Backend::HostRowsDone), and whole after a copy. Only a hint if the kernel refuses.
  const bool sole_view = use == WeightUse::kLinear || use == WeightUse::kEmbeddingAndLinear;
  auto release = [&](int64_t b, int64_t e) {
    absl::Status released = checkpoint.ReleasePages(rows.Rows(b, e));
    if (!released.ok()) spdlog::debug("bloom: keeping the pages of {}: {}", name, released.ToString());
  };
  BLOSSOM_ASSIGN_OR_RETURN(
      Tensor imported,
      Import(rows, use, quant, sole_view ? Backend::HostRowsDone(release) : nullptr));
  if (sole_view && imported.data != rows.data) release(0, rows.dim(0));
  return imported;
}

absl::StatusOr<Tensor> BloomModel::ImportColumns(const Checkpoint& checkpoint,
                                                 const std::string& name,
                                                 std::vector<int64_t> shape, int64_t begin,
                                                 int64_t end, WeightUse use, WeightQuant quant,
                                                 std::optional<DType> dtype) {
  if (begin == 0 && end == shape[1])
    return ImportRows(checkpoint, name, shape, 0, shape[0], use, quant, dtype);
  BLOSSOM_ASSIGN_OR_RETURN(Tensor host, GetFloatWeight(checkpoint, name, shape));
  // A column slice is strided in the file: copy just this rank's part (never the whole tensor).
  return ImportCopy(checkpoint, name, host, 0, shape[0], begin, end, dtype.value_or(host.dtype),
                    use, quant);
}

absl::StatusOr<Tensor> BloomModel::ImportCopy(const Checkpoint& checkpoint,
                                              const std::string& name, const Tensor& mapped,
                                              int64_t row_begin, int64_t row_end,
                                              int64_t col_begin, int64_t col_end, DType dtype,
                                              WeightUse use, WeightQuant quant) {
  std::vector<char> copy;
  absl::StatusOr<Tensor> view =
      CopyWeightBlock(mapped, row_begin, row_end, col_begin, col_end, dtype, &copy);
  if (!view.ok()) {
    return absl::Status(view.status().code(), absl::StrCat(checkpoint.DescribeLocation(name), ": '",
                                                           name, "': ", view.status().message()));
  }
  // Nothing views these mapped rows now (the model reads the copy or the backend's copy of it):
  // their pages go back before the backend copies, so the block is never resident three times.
  // For a column slice the other ranks' columns share the pages; a rank still copying them reads
  // them back in (a minor fault from the page cache). Only a hint if the kernel refuses.
  absl::Status released = checkpoint.ReleasePages(mapped.Rows(row_begin, row_end));
  if (!released.ok()) spdlog::debug("bloom: keeping the pages of {}: {}", name, released.ToString());
  return ImportHostBlock(std::move(copy), *view, use, quant);
}

absl::StatusOr<Tensor> BloomModel::ImportHostBlock(std::vector<char> storage, const Tensor& view,
                                                   WeightUse use, WeightQuant quant) {
  // Zero-copy backends point into it; moving the vector keeps its data where it is.
  host_slices_.push_back(std::move(storage));
  BLOSSOM_ASSIGN_OR_RETURN(Tensor imported, Import(view, use, quant, nullptr));
  // The backend copied it (a GPU upload, a repack, quantization): the host copy has served.
  if (imported.data != view.data) host_slices_.pop_back();
  return imported;
}

absl::StatusOr<Tensor> BloomModel::ImportMerged(const Checkpoint& checkpoint,
                                                const std::string& name,
                                                const std::vector<int64_t>& shape,
                                                int64_t row_begin, int64_t row_end,
                                                int64_t col_begin, int64_t col_end,
                                                WeightQuant quant, std::optional<DType> dtype) {
  BLOSSOM_ASSIGN_OR_RETURN(Tensor host, GetFloatWeight(checkpoint, name, shape));
  std::vector<char> f32_storage;
  BLOSSOM_ASSIGN_OR_RETURN(Tensor block, CopyWeightBlock(host, row_begin, row_end, col_begin,
                                                         col_end, DType::kF32, &f32_storage));
  BLOSSOM_RETURN_IF_ERROR(lora_->AddDelta(name, row_begin, row_end, col_begin, col_end,
                                          static_cast<float*>(block.data)));
  // The mapped rows have served (as in ImportCopy); only a hint if the kernel refuses.
  if (absl::Status released = checkpoint.ReleasePages(host.Rows(row_begin, row_end));
      !released.ok()) {
    spdlog::debug("bloom: keeping the pages of {}: {}", name, released.ToString());
  }
  const DType target = dtype.value_or(host.dtype);
  if (target == DType::kF32) {
    return ImportHostBlock(std::move(f32_storage), block, WeightUse::kLinear, quant);
  }
  // Rounded once to the weight's dtype; the float32 block is freed on return.
  std::vector<char> rounded;
  BLOSSOM_ASSIGN_OR_RETURN(
      Tensor view, CopyWeightBlock(block, 0, block.dim(0), 0, block.dim(1), target, &rounded));
  return ImportHostBlock(std::move(rounded), view, WeightUse::kLinear, quant);
}

absl::Status BloomModel::LoadWeights(const Checkpoint& ckpt) {
  const int64_t h = config_.hidden_size, v = config_.vocab_size, ffn = config_.ffn_hidden_size();
  const int world = communicator_->world_size(), rank = communicator_->rank();
  const int64_t d = config_.head_dim();
  const int64_t heads_local = local_heads_;
  const int64_t ffn_local = ffn / world;
  const int64_t h_local = heads_local * d;
  const WeightQuant q = info_.quantize;  // for the Linear weights
  const WeightQuant q_head = info_.quantize_lm_head ? q : WeightQuant::kNone;
  const std::string emb = EmbeddingTensorName(ckpt);
  const DType compute = info_.weight_dtype;  // the embedding's (Load)
  const DTypePlan plan = PlanWeightDTypes(ckpt, compute, q, q_head, /*log=*/rank == 0);
  // A Linear weight the LoRA adapter changes is merged on a host copy of this rank's block.
  const auto merged = [&](const std::string& name) { return lora_ && lora_->Changes(name); };
  // rows / cols: a slice of a tensor that is not a Linear weight, unless `linear_quant` is given
  // (then imported as `linear_use` says).
  auto rows = [&](const std::string& name, std::vector<int64_t> shape, int64_t b, int64_t e,
                  Tensor* out, std::optional<WeightQuant> linear_quant = std::nullopt,
                  WeightUse linear_use = WeightUse::kLinear) -> absl::Status {
    absl::StatusOr<Tensor> t =
        merged(name) && linear_quant.has_value()
            ? ImportMerged(ckpt, name, shape, b, e, 0, shape[1], *linear_quant,
                           plan.DTypeFor(name))
            : ImportRows(ckpt, name, std::move(shape), b, e,
                         linear_quant ? linear_use : WeightUse::kOther,
                         linear_quant.value_or(WeightQuant::kNone), plan.DTypeFor(name));
    if (!t.ok()) return t.status();
    *out = *t;
    return absl::OkStatus();
  };
  auto whole = [&](const std::string& name, std::vector<int64_t> shape, Tensor* out) {
    int64_t n = shape[0];
    return rows(name, std::move(shape), 0, n, out);
  };
  auto cols = [&](const std::string& name, std::vector<int64_t> shape, int64_t b, int64_t e,
                  Tensor* out, WeightQuant linear_quant) -> absl::Status {
    absl::StatusOr<Tensor> t =
        merged(name) ? ImportMerged(ckpt, name, shape, 0, shape[0], b, e, linear_quant,
                                    plan.DTypeFor(name))
                     : ImportColumns(ckpt, name, std::move(shape), b, e, WeightUse::kLinear,
                                     linear_quant, plan.DTypeFor(name));
    if (!t.ok()) return t.status();
    *out = *t;
    return absl::OkStatus();
  };
  // A tied head that is not quantized apart is the embedding table itself: one import for both.
  const bool embedding_is_head = config_.tie_word_embeddings && q_head == WeightQuant::kNone;
  BLOSSOM_RETURN_IF_ERROR(
      embedding_is_head
          ? rows(emb, {v, h}, vocab_begin_, vocab_begin_ + vocab_local_, &word_embeddings_,
                 WeightQuant::kNone, WeightUse::kEmbeddingAndLinear)
          : rows(emb, {v, h}, vocab_begin_, vocab_begin_ + vocab_local_, &word_embeddings_));
  BLOSSOM_RETURN_IF_ERROR(whole("word_embeddings_layernorm.weight", {h}, &emb_ln_gamma_));
  BLOSSOM_RETURN_IF_ERROR(whole("word_embeddings_layernorm.bias", {h}, &emb_ln_beta_));
  BLOSSOM_RETURN_IF_ERROR(whole("ln_f.weight", {h}, &ln_f_gamma_));
  BLOSSOM_RETURN_IF_ERROR(whole("ln_f.bias", {h}, &ln_f_beta_));
  if (!config_.tie_word_embeddings) {
    // An untied head is its own matrix; serving the embeddings instead would silently change
    // every logit, so a config that unties it without the tensor is an error.
    if (!ckpt.Has(kLmHeadName)) {
      return absl::InvalidArgumentError(absl::StrCat(
          ckpt.model_dir(), ": config.json sets tie_word_embeddings: false but the checkpoint "
          "has no 'lm_head.weight' (the untied LM head)"));
    }
    BLOSSOM_RETURN_IF_ERROR(rows(kLmHeadName, {v, h}, vocab_begin_,
                                 vocab_begin_ + vocab_local_, &lm_head_, q_head));
  } else {
    if (emb != kLmHeadName && ckpt.Has(kLmHeadName)) {
      // Tied: an explicit copy must agree in shape. It is not loaded (the embedding is used),
      // exactly as Hugging Face ties it on load.
      absl::StatusOr<Tensor> lm_head = ckpt.Get(kLmHeadName, {v, h}, Misaligned::kAllow);
      if (!lm_head.ok()) return lm_head.status();
    }
    lm_head_ = word_embeddings_;
    if (q_head != WeightQuant::kNone) {
      BLOSSOM_RETURN_IF_ERROR(rows(emb, {v, h}, vocab_begin_, vocab_begin_ + vocab_local_,
                                   &lm_head_, q_head, WeightUse::kLinearOfViewedTensor));
    }
  }
  layers_.resize(config_.n_layer);
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    const std::string p = absl::StrCat("h.", i, ".");
    LayerWeights& L = layers_[i];
    BLOSSOM_RETURN_IF_ERROR(whole(p + "input_layernorm.weight", {h}, &L.input_ln_gamma));
    BLOSSOM_RETURN_IF_ERROR(whole(p + "input_layernorm.bias", {h}, &L.input_ln_beta));
    // Row order [head][q,k,v][d]: a contiguous block of rows holds whole heads of this rank.
    const int64_t qkv_begin = rank * heads_local * 3 * d, qkv_end = qkv_begin + heads_local * 3 * d;
    BLOSSOM_RETURN_IF_ERROR(rows(p + "self_attention.query_key_value.weight", {3 * h, h},
                                 qkv_begin, qkv_end, &L.qkv_weight, q));
    BLOSSOM_RETURN_IF_ERROR(rows(p + "self_attention.query_key_value.bias", {3 * h}, qkv_begin,
                                 qkv_end, &L.qkv_bias));
    BLOSSOM_RETURN_IF_ERROR(cols(p + "self_attention.dense.weight", {h, h}, rank * h_local,
                                 (rank + 1) * h_local, &L.dense_weight, q));
    BLOSSOM_RETURN_IF_ERROR(whole(p + "self_attention.dense.bias", {h}, &L.dense_bias));
    BLOSSOM_RETURN_IF_ERROR(whole(p + "post_attention_layernorm.weight", {h}, &L.post_ln_gamma));
    BLOSSOM_RETURN_IF_ERROR(whole(p + "post_attention_layernorm.bias", {h}, &L.post_ln_beta));
    BLOSSOM_RETURN_IF_ERROR(rows(p + "mlp.dense_h_to_4h.weight", {ffn, h}, rank * ffn_local,
                                 (rank + 1) * ffn_local, &L.fc1_weight, q));
    BLOSSOM_RETURN_IF_ERROR(rows(p + "mlp.dense_h_to_4h.bias", {ffn}, rank * ffn_local,
                                 (rank + 1) * ffn_local, &L.fc1_bias));
    BLOSSOM_RETURN_IF_ERROR(cols(p + "mlp.dense_4h_to_h.weight", {h, ffn}, rank * ffn_local,
                                 (rank + 1) * ffn_local, &L.fc2_weight, q));
    BLOSSOM_RETURN_IF_ERROR(whole(p + "mlp.dense_4h_to_h.bias", {h}, &L.fc2_bias));
  }
  return absl::OkStatus();
}

}  // namespace blossom
