// A PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors, as PEFT's
// save_pretrained writes it and adapters are shared on the Hugging Face Hub) for a BLOOM model,
// merged into the base weights at load: W' = W + scale * B @ A, with scale = lora_alpha / r
// (lora_alpha / sqrt(r) under use_rslora). The merged model computes what PEFT's unmerged
// forward, base(x) + B(A(x)) * scale, computes, up to float rounding, and then costs nothing
// per token: one adapter per server, as llama.cpp's --lora and CTranslate2's merged models
// (vLLM and TGI switch adapters per request instead).
//
// What is supported is what PEFT can save for BLOOM's Linear layers: any of query_key_value,
// dense, dense_h_to_4h and dense_4h_to_h, in any layers (layers_to_transform), with any rank.
// Everything that would change the model in a way a merge of these does not express is refused
// at load, naming the setting: DoRA (use_dora), trained biases (bias other than "none"),
// modules_to_save (full copies of other layers), rank_pattern/alpha_pattern, LoRA on the
// embeddings, and a peft_type other than LORA. A tensor the config does not explain, a lora_A
// without its lora_B, a rank that differs from r, and a shape that does not fit the base
// model's layer are refused too.
//
// Thread-safety: immutable after Load; AddDelta may run on several threads at once (each
// tensor-parallel rank merges its own slices).
#ifndef BLOSSOM_ENGINE_LOADER_LORA_ADAPTER_H_
#define BLOSSOM_ENGINE_LOADER_LORA_ADAPTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"

namespace blossom {

class LoraAdapter {
 public:
  // Reads `dir`/adapter_config.json and `dir`/adapter_model.safetensors and checks them against
  // `config` (the base model's). Errors start with the file at fault.
  static absl::StatusOr<std::unique_ptr<LoraAdapter>> Load(const std::string& dir,
                                                           const BloomConfig& config);

  // Whether the adapter changes the base weight `name`, a checkpoint name without the
  // "transformer." prefix (e.g. "h.3.self_attention.query_key_value.weight").
  bool Changes(const std::string& name) const { return pairs_.count(name) != 0; }

  // Adds scale * (B @ A)[row_begin:row_end, col_begin:col_end] to `block`, a row-major float32
  // [row_end - row_begin, col_end - col_begin] slice of the weight `name` ([out, in], as
  // nn.Linear stores it). InvalidArgument for a name it does not change or a range outside the
  // weight.
  absl::Status AddDelta(const std::string& name, int64_t row_begin, int64_t row_end,
                        int64_t col_begin, int64_t col_end, float* block) const;

  const std::string& dir() const { return dir_; }
  int32_t rank() const { return rank_; }
  float scale() const { return scale_; }
  // The base weights it changes, sorted.
  std::vector<std::string> changed_weights() const;

 private:
  struct Pair {
    std::vector<float> a;  // [rank, in]
    std::vector<float> b;  // [out, rank]
    int64_t out = 0, in = 0;
  };

  std::string dir_;
  int32_t rank_ = 0;
  float scale_ = 0.0f;
  std::map<std::string, Pair> pairs_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_LORA_ADAPTER_H_
