#include "engine/loader/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/loader/file_util.h"
#include "engine/loader/json_util.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

using nlohmann::json;

// A field that may be spelled two ways. Returns the value under whichever spelling is present
// (nullptr if neither); both present with different values is an error naming both.
// `alias` may be null for fields with a single spelling.
absl::StatusOr<const json*> FindAliased(const json& root, absl::string_view source,
                                        const char* primary, const char* alias) {
  auto a = root.find(primary);
  auto b = alias != nullptr ? root.find(alias) : root.end();
  const json* va = a != root.end() ? &*a : nullptr;
  const json* vb = b != root.end() ? &*b : nullptr;
  if (va != nullptr && vb != nullptr && *va != *vb) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": fields '", primary, "' (", DescribeJsonValue(*va), ") and '", alias, "' (",
        DescribeJsonValue(*vb), ") are two spellings of the same setting but disagree"));
  }
  return va != nullptr ? va : vb;
}

absl::StatusOr<int64_t> RequiredPositiveInt(const json& root, absl::string_view source,
                                            const char* primary, const char* alias) {
  absl::StatusOr<const json*> found = FindAliased(root, source, primary, alias);
  if (!found.ok()) return found.status();
  std::string names = alias != nullptr ? absl::StrCat("'", primary, "' (or '", alias, "')")
                                       : absl::StrCat("'", primary, "'");
  if (*found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": required field ", names, " is missing"));
  }
  int64_t value;
  if (!JsonToInt64(**found, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": field ", names, " must be an integer, got ", DescribeJsonValue(**found)));
  }
  if (value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field ", names, " must be positive, got ", value));
  }
  return value;
}

// Returns nullptr when the field is absent or null (both mean "use the default").
const json* FindOptional(const json& root, const char* name) {
  auto it = root.find(name);
  if (it == root.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status WrongType(absl::string_view source, const char* field, const char* expected,
                       const json& value) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": field '", field, "' must be ", expected,
                                                 ", got ", DescribeJsonValue(value)));
}

absl::Status ReadTokenId(const json& root, absl::string_view source, const char* field,
                         int64_t vocab_size, int32_t* out) {
  const json* v = FindOptional(root, field);
  if (v == nullptr) return absl::OkStatus();
  int64_t id;
  if (!JsonToInt64(*v, &id)) return WrongType(source, field, "an integer", *v);
  if (id < 0 || id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": field '", field, "' = ", id,
                                                   " is outside the vocabulary [0, ", vocab_size,
                                                   ")"));
  }
  *out = static_cast<int32_t>(id);
  return absl::OkStatus();
}

// eos_token_id: one id, or (as Hugging Face accepts, e.g. for chat fine-tunes with several end
// tokens) a non-empty list of ids; the engine stops at every one of them (StopChecker), the
// first is eos_token_id.
absl::Status ReadEosTokenIds(const json& root, absl::string_view source, int64_t vocab_size,
                             BloomConfig* config) {
  const json* v = FindOptional(root, "eos_token_id");
  if (v == nullptr) {
    config->eos_token_ids = {config->eos_token_id};
    return absl::OkStatus();
  }
  if (!v->is_array() && !v->is_number_integer()) {
    return WrongType(source, "eos_token_id", "an integer or a non-empty list of integers", *v);
  }
  if (!v->is_array()) {
    absl::Status status =
        ReadTokenId(root, source, "eos_token_id", vocab_size, &config->eos_token_id);
    if (!status.ok()) return status;
    config->eos_token_ids = {config->eos_token_id};
    return absl::OkStatus();
  }
  if (v->empty()) {
    return WrongType(source, "eos_token_id", "an integer or a non-empty list of integers", *v);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    int64_t id;
    if (!JsonToInt64(item, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": field 'eos_token_id'[", i, "] must be an integer, got ",
                       DescribeJsonValue(item)));
    }
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": field 'eos_token_id'[", i,
                                                     "] = ", id, " is outside the vocabulary [0, ",
                                                     vocab_size, ")"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  config->eos_token_id = ids.front();
  config->eos_token_ids = std::move(ids);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BloomConfig> ParseBloomConfig(absl::string_view json_text,
                                             absl::string_view source_name) {
  absl::StatusOr<json> parsed = ParseJsonStrict(json_text, source_name);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  const absl::string_view src = source_name;
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        src, ": expected a JSON object at the top level, got ", DescribeJsonValue(root)));
  }

  if (const json* v = FindOptional(root, "model_type")) {
    if (!v->is_string()) return WrongType(src, "model_type", "a string", *v);
    if (v->get_ref<const std::string&>() != "bloom") {
      return absl::InvalidArgumentError(absl::StrCat(
          src, ": field 'model_type' is ", DescribeJsonValue(*v), ", expected \"bloom\""));
    }
  }
  if (const json* q = FindOptional(root, "quantization_config")) {
    // The weights are packed (GPTQ/AWQ int4 with scales and zeros, bitsandbytes' int8/nf4):
    // their tensors, shapes and dtypes are not BLOOM's, so loading would fail later on a
    // misleading "missing tensor" or "bad dtype". Say what the checkpoint is instead.
    std::string method = "unknown: no 'quant_method'";
    if (q->is_object()) {
      auto m = q->find("quant_method");
      if (m != q->end() && m->is_string()) {
        method = absl::StrCat("'", SanitizeForMessage(m->get_ref<const std::string&>()), "'");
      } else if (m != q->end()) {
        method = absl::StrCat("unknown: 'quant_method' is ", DescribeJsonValue(*m));
      }
    }
    return absl::UnimplementedError(absl::StrCat(
        src, ": field 'quantization_config' (quant_method ", method,
        ") says the checkpoint is pre-quantized, which Blossom cannot load; use the original "
        "unquantized checkpoint (F32, F16 or BF16 weights) and quantize it at load time with "
        "--quantize int8, int4 or bf16"));
  }
  if (const json* v = FindOptional(root, "slow_but_exact")) {
    if (!v->is_boolean()) return WrongType(src, "slow_but_exact", "a boolean", *v);
    if (v->get<bool>()) {
      // Hugging Face only takes its sliced path (each Linear split into pretraining_tp parts, to
      // mimic Megatron's rounding) when pretraining_tp > 1 as well; with 1 slice it is the plain
      // path, which is what Blossom implements. pretraining_tp is only read here, where it
      // matters.
      int64_t tp = 1;
      if (const json* t = FindOptional(root, "pretraining_tp")) {
        if (!JsonToInt64(*t, &tp) || tp < 1) {
          return WrongType(src, "pretraining_tp", "a positive integer", *t);
        }
      }
      if (tp > 1) {
        return absl::UnimplementedError(absl::StrCat(
            src, ": 'slow_but_exact' is true with 'pretraining_tp' ", tp,
            ": Hugging Face then computes every Linear layer in ", tp,
            " slices (to reproduce Megatron's rounding), which Blossom does not implement; it "
            "computes each Linear layer whole, as Hugging Face does with slow_but_exact false "
            "(the released BLOOM checkpoints' setting): set it to false to load this model"));
      }
    }
  }

  BloomConfig config;
  struct Required {
    const char* primary;
    const char* alias;
    int64_t* out;
  };
  for (const Required& field : {Required{"vocab_size", nullptr, &config.vocab_size},
                                Required{"hidden_size", "n_embed", &config.hidden_size},
                                Required{"n_layer", "num_hidden_layers", &config.n_layer},
                                Required{"n_head", "num_attention_heads", &config.n_head}}) {
    absl::StatusOr<int64_t> value = RequiredPositiveInt(root, src, field.primary, field.alias);
    if (!value.ok()) return value.status();
    *field.out = *value;
  }

  if (config.hidden_size % config.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": hidden_size ", config.hidden_size,
                                                   " is not divisible by n_head ", config.n_head));
  }
  if (config.hidden_size > std::numeric_limits<int64_t>::max() / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": hidden_size ", config.hidden_size, " is too large"));
  }

  if (const json* e = FindOptional(root, "layer_norm_epsilon")) {
    if (!e->is_number()) return WrongType(src, "layer_norm_epsilon", "a number", *e);
    double eps = e->get<double>();
    if (!(eps > 0) || !std::isfinite(eps)) {
      return absl::InvalidArgumentError(absl::StrCat(
          src, ": field 'layer_norm_epsilon' must be positive and finite, got ", e->dump()));
    }
    config.layer_norm_epsilon = eps;
  }
  if (const json* b = FindOptional(root, "apply_residual_connection_post_layernorm")) {
    if (!b->is_boolean()) {
      return WrongType(src, "apply_residual_connection_post_layernorm", "a boolean", *b);
    }
    config.apply_residual_connection_post_layernorm = b->get<bool>();
  }
  if (const json* b = FindOptional(root, "tie_word_embeddings")) {
    if (!b->is_boolean()) return WrongType(src, "tie_word_embeddings", "a boolean", *b);
    config.tie_word_embeddings = b->get<bool>();
  }
  for (auto [field, out] : {std::make_pair("bos_token_id", &config.bos_token_id),
                            std::make_pair("pad_token_id", &config.pad_token_id)}) {
    absl::Status status = ReadTokenId(root, src, field, config.vocab_size, out);
    if (!status.ok()) return status;
  }
  absl::Status eos = ReadEosTokenIds(root, src, config.vocab_size, &config);
  if (!eos.ok()) return eos;
  if (const json* t = FindOptional(root, "torch_dtype")) {
    if (!t->is_string()) return WrongType(src, "torch_dtype", "a string", *t);
    config.torch_dtype = t->get<std::string>();
  }
  return config;
}

absl::StatusOr<BloomConfig> LoadBloomConfig(const std::string& model_dir) {
  PathKind dir_kind = GetPathKind(model_dir);
  if (dir_kind == PathKind::kMissing) {
    return absl::NotFoundError(absl::StrCat("model directory '", model_dir, "' does not exist"));
  }
  if (dir_kind != PathKind::kDirectory) {
    return absl::InvalidArgumentError(
        absl::StrCat("model directory '", model_dir, "' is not a directory"));
  }
  std::string path = JoinPath(model_dir, "config.json");
  if (GetPathKind(path) == PathKind::kMissing) {
    return absl::NotFoundError(absl::StrCat("model directory '", model_dir,
                                            "' has no config.json (looked for ", path, ")"));
  }
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(*text, path);
  if (!config.ok()) return config;
  // generation_config.json's eos_token_id (what transformers' generate() stops at; a chat
  // fine-tune lists its end-of-turn token there) joins config.json's ids, as vLLM does.
  const std::string generation_path = JoinPath(model_dir, "generation_config.json");
  if (GetPathKind(generation_path) == PathKind::kMissing) return config;
  absl::StatusOr<std::string> generation_text = ReadFileToString(generation_path);
  if (!generation_text.ok()) return generation_text.status();
  const json generation = json::parse(*generation_text, nullptr, /*allow_exceptions=*/false);
  if (!generation.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(generation_path, ": expected a JSON object (or remove the file)"));
  }
  if (FindOptional(generation, "eos_token_id") == nullptr) return config;
  BloomConfig listed;
  absl::Status read = ReadEosTokenIds(generation, generation_path, config->vocab_size, &listed);
  if (!read.ok()) return read;
  for (int32_t id : listed.eos_token_ids) {
    if (std::find(config->eos_token_ids.begin(), config->eos_token_ids.end(), id) ==
        config->eos_token_ids.end()) {
      config->eos_token_ids.push_back(id);
    }
  }
  return config;
}

}  // namespace blossom
