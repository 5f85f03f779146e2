#include "engine/loader/lora_adapter.h"

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/loader/file_util.h"
#include "engine/loader/json_util.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weight_copy.h"
#include "kernels/status_macros.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

using Json = nlohmann::json;

// The BLOOM Linear layers PEFT can adapt, with their [out, in] shapes.
struct LinearShape {
  const char* module;  // after "h.<i>."
  int64_t out_per_h, in_per_h;
};
constexpr LinearShape kLinears[] = {
    {"self_attention.query_key_value", 3, 1},
    {"self_attention.dense", 1, 1},
    {"mlp.dense_h_to_4h", 4, 1},
    {"mlp.dense_4h_to_h", 1, 4},
};

absl::Status Refuse(const std::string& path, absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(path, ": ", what));
}

// The settings of adapter_config.json a merge of W + scale * B @ A cannot express, refused by
// name; the scale.
absl::StatusOr<float> CheckConfig(const std::string& path, const Json& config, int32_t* rank) {
  if (!config.is_object()) return absl::InvalidArgumentError(path + ": expected a JSON object");
  const auto peft_type = config.find("peft_type");
  if (peft_type == config.end() || !peft_type->is_string()) {
    return absl::InvalidArgumentError(path + ": no peft_type (not a PEFT adapter config)");
  }
  if (peft_type->get<std::string>() != "LORA") {
    return Refuse(path, absl::StrCat("peft_type ", peft_type->get<std::string>(),
                                     " is not supported (only LORA adapters are)"));
  }
  int64_t r = 0;
  if (!config.contains("r") || !JsonToInt64(config["r"], &r) || r < 1 || r > 65536) {
    return absl::InvalidArgumentError(path + ": r must be an integer from 1 to 65536");
  }
  *rank = static_cast<int32_t>(r);
  const auto alpha = config.find("lora_alpha");
  if (alpha == config.end() || !alpha->is_number() || !std::isfinite(alpha->get<double>())) {
    return absl::InvalidArgumentError(path + ": lora_alpha must be a number");
  }
  auto flag = [&](const char* key) {
    const auto it = config.find(key);
    return it != config.end() && it->is_boolean() && it->get<bool>();
  };
  if (flag("use_dora")) {
    return Refuse(path, "use_dora (DoRA's magnitude vectors) is not supported");
  }
  if (const auto bias = config.find("bias");
      bias != config.end() && !bias->is_null() && *bias != "none") {
    return Refuse(path, absl::StrCat("bias ", DescribeJsonValue(*bias),
                                     " (trained biases) is not supported; only \"none\""));
  }
  for (const char* key : {"modules_to_save", "rank_pattern", "alpha_pattern"}) {
    const auto it = config.find(key);
    if (it != config.end() && !it->is_null() && !it->empty()) {
      return Refuse(path, absl::StrCat(key, " is not supported (", DescribeJsonValue(*it), ")"));
    }
  }
  if (flag("fan_in_fan_out")) {
    // As PEFT does for nn.Linear layers (BLOOM's): it warns and sets it back to false.
    spdlog::warn("{}: fan_in_fan_out is true, but BLOOM's layers are nn.Linear: ignored, as PEFT "
                 "ignores it",
                 path);
  }
  const double a = alpha->get<double>();
  return static_cast<float>(flag("use_rslora") ? a / std::sqrt(static_cast<double>(r))
                                               : a / static_cast<double>(r));
}

// "base_model.model.transformer.h.3.mlp.dense_h_to_4h.lora_A.weight" -> weight name
// "h.3.mlp.dense_h_to_4h.weight", part 'A', layer shape; an error naming the tensor otherwise.
absl::Status ParseTensorName(const std::string& path, const std::string& tensor,
                             const BloomConfig& config, std::string* weight, char* part,
                             const LinearShape** shape) {
  absl::string_view rest = tensor;
  if (!absl::ConsumePrefix(&rest, "base_model.model.")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor '", tensor, "' does not start with base_model.model. (not a PEFT adapter)"));
  }
  absl::ConsumePrefix(&rest, "transformer.");
  for (const char* kind : {"lora_A", "lora_B"}) {
    const std::string suffix = absl::StrCat(".", kind, ".weight");
    absl::string_view module = rest;
    if (!absl::ConsumeSuffix(&module, suffix)) continue;
    const std::vector<absl::string_view> parts = absl::StrSplit(module, absl::MaxSplits('.', 2));
    int64_t layer = -1;
    if (parts.size() == 3 && parts[0] == "h" && absl::SimpleAtoi(parts[1], &layer) &&
        layer >= 0 && layer < config.n_layer) {
      for (const LinearShape& linear : kLinears) {
        if (parts[2] != linear.module) continue;
        *weight = absl::StrCat("h.", layer, ".", linear.module, ".weight");
        *part = kind[5];
        *shape = &linear;
        return absl::OkStatus();
      }
    }
    return Refuse(path, absl::StrCat("tensor '", tensor, "' adapts no Linear layer of this "
                                     "BLOOM model (query_key_value, dense, dense_h_to_4h or "
                                     "dense_4h_to_h of layers 0 to ", config.n_layer - 1, ")"));
  }
  return Refuse(path, absl::StrCat("tensor '", tensor, "' is not a LoRA A or B matrix (DoRA "
                                   "vectors, biases and embedding adapters are not supported)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoraAdapter>> LoraAdapter::Load(const std::string& dir,
                                                               const BloomConfig& config) {
  auto adapter = std::unique_ptr<LoraAdapter>(new LoraAdapter());
  adapter->dir_ = dir;
  const std::string config_path = JoinPath(dir, "adapter_config.json");
  BLOSSOM_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  BLOSSOM_ASSIGN_OR_RETURN(Json adapter_config, ParseJsonStrict(config_text, config_path));
  BLOSSOM_ASSIGN_OR_RETURN(adapter->scale_,
                           CheckConfig(config_path, adapter_config, &adapter->rank_));

  const std::string weights_path = JoinPath(dir, "adapter_model.safetensors");
  if (GetPathKind(weights_path) != PathKind::kRegularFile) {
    if (GetPathKind(JoinPath(dir, "adapter_model.bin")) == PathKind::kRegularFile) {
      return absl::UnimplementedError(absl::StrCat(
          dir, ": adapter_model.bin (a pickle, which may run code) is not read; save the "
               "adapter with save_pretrained(..., safe_serialization=True)"));
    }
    return absl::NotFoundError(absl::StrCat(weights_path, ": not found"));
  }
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                           SafetensorsFile::Open(weights_path));
  const int64_t h = config.hidden_size;
  for (const TensorEntry& entry : file->entries()) {
    std::string weight;
    char part = 0;
    const LinearShape* linear = nullptr;
    BLOSSOM_RETURN_IF_ERROR(
        ParseTensorName(weights_path, entry.name, config, &weight, &part, &linear));
    Pair& pair = adapter->pairs_[weight];
    pair.out = linear->out_per_h * h;
    pair.in = linear->in_per_h * h;
    const std::vector<int64_t> want = part == 'A' ? std::vector<int64_t>{adapter->rank_, pair.in}
                                                  : std::vector<int64_t>{pair.out, adapter->rank_};
    if (entry.shape != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          weights_path, ": tensor '", entry.name, "' has shape [", absl::StrJoin(entry.shape, ", "),
          "], expected [", absl::StrJoin(want, ", "), "] (r ", adapter->rank_,
          " and the base model's layer; is this an adapter of another model?)"));
    }
    BLOSSOM_ASSIGN_OR_RETURN(Tensor view, file->View(entry, Misaligned::kAllow));
    std::vector<char> storage;
    absl::StatusOr<Tensor> f32 = CopyWeight(view, DType::kF32, &storage);
    if (!f32.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(weights_path, ": tensor '", entry.name,
                                                     "': ", f32.status().message()));
    }
    const float* values = f32->as<const float>();
    std::vector<float>& dest = part == 'A' ? pair.a : pair.b;
    dest.assign(values, values + f32->numel());
    for (float v : dest) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat(weights_path, ": tensor '", entry.name, "' holds NaN or infinity"));
      }
    }
  }
  if (adapter->pairs_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(weights_path, ": holds no LoRA matrices"));
  }
  for (const auto& [weight, pair] : adapter->pairs_) {
    if (pair.a.empty() || pair.b.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(weights_path, ": ", weight, " has lora_",
                                                     pair.a.empty() ? "B without its lora_A"
                                                                    : "A without its lora_B"));
    }
  }
  return adapter;
}

absl::Status LoraAdapter::AddDelta(const std::string& name, int64_t row_begin, int64_t row_end,
                                   int64_t col_begin, int64_t col_end, float* block) const {
  const auto it = pairs_.find(name);
  if (it == pairs_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": the adapter does not change ", name));
  }
  const Pair& pair = it->second;
  if (row_begin < 0 || row_begin > row_end || row_end > pair.out || col_begin < 0 ||
      col_begin > col_end || col_end > pair.in) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": rows [", row_begin, ", ", row_end, ") and columns [", col_begin,
                     ", ", col_end, ") are outside its [", pair.out, ", ", pair.in, "]"));
  }
  const int64_t width = col_end - col_begin;
  // Row by row: each output row is a sum of `rank` scaled rows of A, accumulated in float32 in
  // the order of k, as B @ A is.
  for (int64_t i = row_begin; i < row_end; ++i) {
    float* out = block + (i - row_begin) * width;
    for (int32_t k = 0; k < rank_; ++k) {
      const float b = scale_ * pair.b[i * rank_ + k];
      const float* a = pair.a.data() + k * pair.in + col_begin;
      for (int64_t j = 0; j < width; ++j) out[j] += b * a[j];
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> LoraAdapter::changed_weights() const {
  std::vector<std::string> names;
  for (const auto& [name, pair] : pairs_) names.push_back(name);
  return names;
}

}  // namespace blossom
