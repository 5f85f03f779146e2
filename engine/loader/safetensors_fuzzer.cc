// libFuzzer entry point (tools/fuzz/fuzz.bzl): arbitrary bytes as a .safetensors file. Open
// must reject every malformed header with a Status (never crash, hang or over-read), and every
// tensor of a file it accepts must be viewable within the mapping.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/blossom_safetensors_fuzz_" + std::to_string(getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto file = blossom::SafetensorsFile::Open(path);
  if (file.ok()) {
    uint64_t checksum = 0;
    for (const blossom::TensorEntry& entry : (*file)->entries()) {
      auto view = (*file)->View(entry);
      if (!view.ok() || view->bytes() == 0) continue;
      const auto* bytes = static_cast<const uint8_t*>(view->data);
      checksum += bytes[0] + bytes[view->bytes() - 1];  // first and last byte are in the mapping
    }
    if (checksum == 1) std::printf(" ");  // keep the reads
  }
  return 0;
}
