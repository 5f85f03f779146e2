#include "engine/sampling/logit_masks.h"

#include <algorithm>
#include <limits>

namespace blossom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

void MaskAllTokensBut(absl::Span<const int32_t> kept, absl::Span<float> logits,
                      std::vector<uint8_t>& seen) {
  const size_t vocab = logits.size();
  seen.resize(vocab);  // zero between calls
  for (int32_t t : kept) seen[t] = 1;
  for (size_t i = 0; i < vocab; ++i) {
    if (!seen[i]) logits[i] = -kInf;
  }
  for (int32_t t : kept) seen[t] = 0;
}

void MaskToChoiceTokens(const std::vector<std::vector<int32_t>>& choices,
                        absl::Span<const int32_t> output, int32_t end_token,
                        absl::Span<float> logits, std::vector<int32_t>& kept,
                        std::vector<uint8_t>& seen) {
  const size_t vocab = logits.size();
  kept.clear();
  const size_t n = output.size();
  for (const std::vector<int32_t>& choice : choices) {
    if (choice.size() < n || !std::equal(output.begin(), output.end(), choice.begin())) continue;
    const int32_t next = choice.size() > n ? choice[n] : end_token;
    if (next >= 0 && static_cast<size_t>(next) < vocab) kept.push_back(next);
  }
  MaskAllTokensBut(kept, logits, seen);
}

void MaskToAllowedBits(const TokenBitmask& allowed, absl::Span<float> logits) {
  const size_t vocab = logits.size();
  for (size_t base = 0; base < vocab; base += 64) {
    const size_t word = base / 64;
    const uint64_t bits = word < allowed.size() ? allowed[word] : 0;
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(vocab, base + 64);
    for (size_t i = base; i < end; ++i) {
      if (((bits >> (i - base)) & 1u) == 0) logits[i] = -kInf;
    }
  }
}

}  // namespace blossom
