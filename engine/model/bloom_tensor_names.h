// Which checkpoint tensors a BLOOM model reads, and what to do about the others.
//
// Hugging Face lists tensors it does not use as "unexpected keys" on load and carries on; a
// checkpoint with such tensors is often a different architecture or a mis-converted one (say, a
// fine-tune with an extra head), so Blossom logs each one by name and, under strict loading,
// refuses the checkpoint instead of serving it.
#ifndef BLOSSOM_ENGINE_MODEL_BLOOM_TENSOR_NAMES_H_
#define BLOSSOM_ENGINE_MODEL_BLOOM_TENSOR_NAMES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/loader/checkpoint.h"
#include "engine/loader/model_config.h"

namespace blossom {

// The canonical names (no "transformer." prefix) a BLOOM model of `config` may read, sorted.
// lm_head.weight is included whether tied or not: a tied checkpoint may carry a copy of it.
std::vector<std::string> BloomTensorNames(const BloomConfig& config);

// The checkpoint's canonical tensor names that BloomTensorNames does not list, sorted.
std::vector<std::string> UnexpectedTensors(const Checkpoint& checkpoint);

// Logs each unexpected tensor by name (a warning, when `log` is set) and returns OK, or with
// `strict` returns InvalidArgument naming the checkpoint and every unexpected tensor.
absl::Status CheckUnexpectedTensors(const Checkpoint& checkpoint, bool strict, bool log);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_BLOOM_TENSOR_NAMES_H_
