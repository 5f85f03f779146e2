#include "engine/model/bloom_tensor_names.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace blossom {

std::vector<std::string> BloomTensorNames(const BloomConfig& config) {
  std::vector<std::string> names = {"word_embeddings.weight",
                                    "word_embeddings_layernorm.weight",
                                    "word_embeddings_layernorm.bias",
                                    "ln_f.weight",
                                    "ln_f.bias",
                                    "lm_head.weight"};
  for (int64_t i = 0; i < config.n_layer; ++i) {
    for (const char* suffix :
         {"input_layernorm", "self_attention.query_key_value", "self_attention.dense",
          "post_attention_layernorm", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"}) {
      names.push_back(absl::StrCat("h.", i, ".", suffix, ".weight"));
      names.push_back(absl::StrCat("h.", i, ".", suffix, ".bias"));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> UnexpectedTensors(const Checkpoint& checkpoint) {
  const std::vector<std::string> known = BloomTensorNames(checkpoint.config());
  const absl::flat_hash_set<std::string> known_set(known.begin(), known.end());
  std::vector<std::string> unexpected;
  for (std::string& name : checkpoint.CanonicalNames()) {
    if (!known_set.contains(name)) unexpected.push_back(std::move(name));
  }
  return unexpected;  // CanonicalNames is sorted
}

absl::Status CheckUnexpectedTensors(const Checkpoint& checkpoint, bool strict, bool log) {
  const std::vector<std::string> unexpected = UnexpectedTensors(checkpoint);
  if (unexpected.empty()) return absl::OkStatus();
  if (strict) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.model_dir(), ": ", unexpected.size(),
        " tensor(s) that a BLOOM model does not use (refused by strict loading): ",
        absl::StrJoin(unexpected, ", ")));
  }
  if (log) {
    for (const std::string& name : unexpected) {
      spdlog::warn("{}: unexpected tensor '{}' ({}) is not used by the BLOOM model",
                   checkpoint.model_dir(), name, checkpoint.DescribeLocation(name));
    }
  }
  return absl::OkStatus();
}

}  // namespace blossom
