// libFuzzer entry point (tools/fuzz/fuzz.bzl): arbitrary bytes as tokenizer.json. FromJson must
// reject what it cannot honour with a Status; a tokenizer it accepts must encode and decode a
// fixed text without crashing.
#include <cstdint>

#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tokenizer = blossom::Tokenizer::FromJson(absl::string_view(reinterpret_cast<const char*>(data), size),
                                                "fuzz/tokenizer.json");
  if (tokenizer.ok()) {
    auto ids = (*tokenizer)->Encode("Hello, world! Grüße 😀 \n\t 123");
    if (ids.ok()) (*tokenizer)->Decode(*ids);
  }
  return 0;
}
