// The shapes of the released BLOOM models, by name, and the parameter arithmetic derived from
// them (parameter count, bytes of weights, KV bytes per token).
//
// Shared by the random-checkpoint tool (which writes tensors of these shapes) and the roofline
// (which needs the bytes and FLOPs a decode step must touch). Pure functions over a plain value
// type; thread-safe.
#ifndef BLOSSOM_BENCHMARKS_BLOOM_SHAPES_H_
#define BLOSSOM_BENCHMARKS_BLOOM_SHAPES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom {

// Plain value type. A valid shape has every field > 0 and hidden % heads == 0 (see Validate).
struct BloomShape {
  std::string name;  // "560m", "176b-2layers", "custom", ...
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t vocab = 250880;

  int64_t head_dim() const { return hidden / heads; }
  // L * (12 h^2 + 13 h) + V h + 4 h: the tied LM head is the embedding, counted once.
  int64_t ParamCount() const;
};

// Known names: 560m, 1b1, 1b7, 3b, 7b1, 176b (70 layers), and 176b-<N>layers (N >= 1: the
// 176B shape with N layers, for exercising one GPU with the real hidden size). Case-sensitive.
absl::StatusOr<BloomShape> BloomShapeByName(absl::string_view name);

// The names BloomShapeByName accepts (the 176b-<N>layers family shown once), for usage text.
std::vector<std::string> KnownBloomShapeNames();

// InvalidArgument naming the first bad field.
absl::Status ValidateBloomShape(const BloomShape& shape);

// Every tensor of a BLOOM checkpoint in Hugging Face's canonical order (embedding, its LayerNorm,
// layer 0..L-1, ln_f), with its shape, names without the "transformer." prefix. lm_head.weight is
// absent (tied), as in the released checkpoints.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  // How Hugging Face initialises it: Linear/Embedding weights normal(0, std), LayerNorm weight
  // 1, every bias and LayerNorm bias 0.
  enum class Init { kNormal, kOnes, kZeros } init = Init::kNormal;

  int64_t NumElements() const;
};
std::vector<TensorSpec> BloomTensorSpecs(const BloomShape& shape);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_BLOOM_SHAPES_H_
