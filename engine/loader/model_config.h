// BLOOM hyper-parameters from a Hugging Face config.json.
//
// Hub files spell some fields two ways (n_embed / hidden_size, n_head / num_attention_heads,
// n_layer / num_hidden_layers): both are accepted, and a file that has both spellings with
// different values is rejected rather than guessing which one the author meant. Fields the model
// does not use are ignored; fields it does use are type-checked, because a silently defaulted
// value (say, a quoted "1e-5") would give subtly wrong numerics instead of an error.
#ifndef BLOSSOM_ENGINE_LOADER_MODEL_CONFIG_H_
#define BLOSSOM_ENGINE_LOADER_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom {

// Plain value type. Invariants after a successful Parse/Load: vocab_size, hidden_size, n_layer,
// n_head > 0; hidden_size % n_head == 0; 4 * hidden_size fits in int64; layer_norm_epsilon > 0
// and finite; token ids in [0, vocab_size).
struct BloomConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  double layer_norm_epsilon = 1e-5;
  bool apply_residual_connection_post_layernorm = false;
  // HF's default (PretrainedConfig): the LM head is the word embedding matrix. false: the
  // checkpoint must carry its own lm_head.weight.
  bool tie_word_embeddings = true;
  int32_t bos_token_id = 1;
  // The first end-of-sequence id (what ModelInfo reports, and the one a guided output ends
  // with). config.json may give a list (HF accepts one): then eos_token_ids holds them all.
  int32_t eos_token_id = 2;
  // Every end-of-sequence id: config.json's eos_token_id (one or a list, in order;
  // {eos_token_id} when it gives one integer or none), then generation_config.json's that are
  // not among them (LoadBloomConfig). Each is an EOS: it ends a request (finish reason
  // eos_token) and a beam unless the request ignores EOS (StopChecker, stop_checker.h), as
  // transformers' generate() treats a list eos_token_id.
  std::vector<int32_t> eos_token_ids{2};
  int32_t pad_token_id = 3;
  std::string torch_dtype;  // as written ("float16", "bfloat16", ...); "" if absent or null

  int64_t head_dim() const { return hidden_size / n_head; }
  // BLOOM's MLP inner size is always 4 * hidden (config's n_inner is ignored, as in HF).
  int64_t ffn_hidden_size() const { return 4 * hidden_size; }
};

// Parses config.json text. `source_name` (usually the file path) prefixes every error message.
// Errors: InvalidArgument for malformed JSON or values (naming the field); Unimplemented for a
// quantized checkpoint (a quantization_config: GPTQ, AWQ, bitsandbytes, ...; Blossom quantizes
// an unquantized checkpoint at load instead, --quantize) and for slow_but_exact: true with
// pretraining_tp > 1 (the only combination where Hugging Face's forward differs).
absl::StatusOr<BloomConfig> ParseBloomConfig(absl::string_view json_text,
                                             absl::string_view source_name);

// Reads and parses model_dir/config.json, and adds generation_config.json's eos_token_id (an
// id or a list) to eos_token_ids when that file exists. NotFound names the directory or the
// file looked for; InvalidArgument names a malformed file or field.
absl::StatusOr<BloomConfig> LoadBloomConfig(const std::string& model_dir);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_MODEL_CONFIG_H_
