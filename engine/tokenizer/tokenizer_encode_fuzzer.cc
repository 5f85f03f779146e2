// libFuzzer entry point (tools/fuzz/fuzz.bzl): arbitrary bytes as a prompt, through the BLOOM-like
// fixture tokenizer, since every client prompt reaches Encode. Invalid UTF-8 must be an error;
// valid text must encode to in-vocabulary ids that decode back to exactly the text (byte-level
// BPE loses nothing), and decoding arbitrary ids must not crash.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace {

const blossom::Tokenizer& FixtureTokenizer() {
  // The fuzzer runs from the repository root; the replay test from its runfiles root.
  static const std::unique_ptr<blossom::Tokenizer> tokenizer = [] {
    const char* env = std::getenv("BLOSSOM_FUZZ_TOKENIZER");
    auto t = blossom::Tokenizer::FromFile(env != nullptr ? env : "tests/fixtures/tokenizer/tokenizer.json");
    if (!t.ok()) std::abort();
    return std::move(*t);
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const blossom::Tokenizer& tokenizer = FixtureTokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ids = tokenizer.Encode(text);
  if (ids.ok()) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
    }
    if (tokenizer.Decode(*ids) != text) std::abort();
  }
  // The same bytes read as ids (clients send token ids too).
  std::vector<int32_t> raw(size / 4);
  for (size_t i = 0; i < raw.size(); ++i) {
    raw[i] = static_cast<int32_t>(data[4 * i] | (data[4 * i + 1] << 8) | (data[4 * i + 2] << 16) |
                                  (static_cast<uint32_t>(data[4 * i + 3]) << 24));
  }
  tokenizer.Decode(raw);
  tokenizer.Decode(raw, /*skip_special_tokens=*/true);
  return 0;
}
