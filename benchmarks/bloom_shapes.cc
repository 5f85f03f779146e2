#include "benchmarks/bloom_shapes.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace blossom {
namespace {

struct NamedShape {
  const char* name;
  int64_t hidden, layers, heads;
};

// From the model cards / config.json files (reference/bloom.md); vocab is always 250880.
constexpr NamedShape kShapes[] = {
    {"560m", 1024, 24, 16}, {"1b1", 1536, 24, 16}, {"1b7", 2048, 24, 16},
    {"3b", 2560, 30, 32},   {"7b1", 4096, 30, 32}, {"176b", 14336, 70, 112},
};

}  // namespace

int64_t BloomShape::ParamCount() const {
  return layers * (12 * hidden * hidden + 13 * hidden) + vocab * hidden + 4 * hidden;
}

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status ValidateBloomShape(const BloomShape& shape) {
  if (shape.hidden <= 0) return absl::InvalidArgumentError("hidden size must be positive");
  if (shape.layers <= 0) return absl::InvalidArgumentError("layer count must be positive");
  if (shape.heads <= 0) return absl::InvalidArgumentError("head count must be positive");
  if (shape.vocab <= 3) {
    // The special tokens <unk> <s> </s> <pad> are ids 0..3.
    return absl::InvalidArgumentError("vocab size must be at least 4");
  }
  if (shape.hidden % shape.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden size ", shape.hidden, " is not divisible by the head count ", shape.heads));
  }
  return absl::OkStatus();
}

absl::StatusOr<BloomShape> BloomShapeByName(absl::string_view name) {
  for (const NamedShape& s : kShapes) {
    if (name == s.name) return BloomShape{s.name, s.hidden, s.layers, s.heads, 250880};
  }
  constexpr absl::string_view kPrefix = "176b-", kSuffix = "layers";
  if (absl::StartsWith(name, kPrefix) && absl::EndsWith(name, kSuffix) &&
      name.size() > kPrefix.size() + kSuffix.size()) {
    absl::string_view digits =
        name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    int64_t layers = 0;
    if (absl::SimpleAtoi(digits, &layers) && layers > 0 && layers <= 70) {
      return BloomShape{std::string(name), 14336, layers, 112, 250880};
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown BLOOM shape '", name, "' (known: ",
                                                 absl::StrJoin(KnownBloomShapeNames(), ", "), ")"));
}

std::vector<std::string> KnownBloomShapeNames() {
  std::vector<std::string> names;
  for (const NamedShape& s : kShapes) names.push_back(s.name);
  names.push_back("176b-<N>layers");
  return names;
}

std::vector<TensorSpec> BloomTensorSpecs(const BloomShape& shape) {
  using Init = TensorSpec::Init;
  const int64_t h = shape.hidden;
  std::vector<TensorSpec> specs;
  specs.push_back({"word_embeddings.weight", {shape.vocab, h}, Init::kNormal});
  specs.push_back({"word_embeddings_layernorm.weight", {h}, Init::kOnes});
  specs.push_back({"word_embeddings_layernorm.bias", {h}, Init::kZeros});
  for (int64_t i = 0; i < shape.layers; ++i) {
    const std::string p = absl::StrCat("h.", i, ".");
    specs.push_back({p + "input_layernorm.weight", {h}, Init::kOnes});
    specs.push_back({p + "input_layernorm.bias", {h}, Init::kZeros});
    specs.push_back({p + "self_attention.query_key_value.weight", {3 * h, h}, Init::kNormal});
    specs.push_back({p + "self_attention.query_key_value.bias", {3 * h}, Init::kZeros});
    specs.push_back({p + "self_attention.dense.weight", {h, h}, Init::kNormal});
    specs.push_back({p + "self_attention.dense.bias", {h}, Init::kZeros});
    specs.push_back({p + "post_attention_layernorm.weight", {h}, Init::kOnes});
    specs.push_back({p + "post_attention_layernorm.bias", {h}, Init::kZeros});
    specs.push_back({p + "mlp.dense_h_to_4h.weight", {4 * h, h}, Init::kNormal});
    specs.push_back({p + "mlp.dense_h_to_4h.bias", {4 * h}, Init::kZeros});
    specs.push_back({p + "mlp.dense_4h_to_h.weight", {h, 4 * h}, Init::kNormal});
    specs.push_back({p + "mlp.dense_4h_to_h.bias", {h}, Init::kZeros});
  }
  specs.push_back({"ln_f.weight", {h}, Init::kOnes});
  specs.push_back({"ln_f.bias", {h}, Init::kZeros});
  return specs;
}

}  // namespace blossom
