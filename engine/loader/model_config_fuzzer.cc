// libFuzzer entry point (tools/fuzz/fuzz.bzl): arbitrary bytes as config.json. ParseBloomConfig
// must return a config that satisfies its documented invariants or an error, never crash.
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "engine/loader/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = blossom::ParseBloomConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  if (config.ok() && (config->vocab_size <= 0 || config->hidden_size <= 0 || config->n_layer <= 0 ||
                      config->n_head <= 0 || config->hidden_size % config->n_head != 0 ||
                      !(config->layer_norm_epsilon > 0 && std::isfinite(config->layer_norm_epsilon)))) {
    std::abort();  // an accepted config that breaks the invariants the model relies on
  }
  return 0;
}
