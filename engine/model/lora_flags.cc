#include "engine/model/lora_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "engine/loader/file_util.h"

ABSL_FLAG(std::string, lora_adapter, "",
          "A PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) merged "
          "into the model's Linear weights at load: W + scale * B @ A, as PEFT's "
          "merge_and_unload. One adapter per server; requests cannot switch it.");

namespace blossom {

absl::Status ApplyLoraAdapterFlag(ModelRunnerOptions* options) {
  const std::string dir = absl::GetFlag(FLAGS_lora_adapter);
  if (dir.empty()) return absl::OkStatus();
  if (GetPathKind(dir) != PathKind::kDirectory) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora_adapter ", dir, ": not a directory (a PEFT adapter folder holding "
                     "adapter_config.json and adapter_model.safetensors)"));
  }
  options->lora_adapter = dir;
  return absl::OkStatus();
}

}  // namespace blossom
