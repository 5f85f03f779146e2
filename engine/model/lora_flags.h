// The --lora_adapter flag, defined once for every binary that loads a model to generate
// (blossom-server, blossom generate): a PEFT LoRA adapter merged into the weights at load
// (engine/loader/lora_adapter.h).
#ifndef BLOSSOM_ENGINE_MODEL_LORA_FLAGS_H_
#define BLOSSOM_ENGINE_MODEL_LORA_FLAGS_H_

#include "absl/status/status.h"
#include "engine/model/model_runner.h"

namespace blossom {

// Sets options->lora_adapter from the flag (after absl::ParseCommandLine). InvalidArgument,
// naming the flag, when it names no directory: refused before minutes of model loading.
absl::Status ApplyLoraAdapterFlag(ModelRunnerOptions* options);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_LORA_FLAGS_H_
