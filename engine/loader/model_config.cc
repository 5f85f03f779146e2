#include "engine/loader/model_config.h"

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
  if (const json* v = FindOptional(root, "slow_but_exact")) {
    if (!v->is_boolean()) return WrongType(src, "slow_but_exact", "a boolean", *v);
    if (v->get<bool>()) {
      // Only affects how HF splits the linear layers under pretraining_tp > 1 (to mimic
      // Megatron's rounding); released checkpoints use false. Refuse rather than silently differ.
      return absl::UnimplementedError(absl::StrCat(
          src,
          ": field 'slow_but_exact' is true; only the plain linear path (false) is implemented"));
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
                            std::make_pair("eos_token_id", &config.eos_token_id),
                            std::make_pair("pad_token_id", &config.pad_token_id)}) {
    absl::Status status = ReadTokenId(root, src, field, config.vocab_size, out);
    if (!status.ok()) return status;
  }
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
  return ParseBloomConfig(*text, path);
}

}  // namespace blossom
