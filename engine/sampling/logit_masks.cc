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

void ChoiceNextTokens(const std::vector<std::vector<int32_t>>& choices,
                      absl::Span<const int32_t> output, int32_t end_token, size_t vocab,
                      std::vector<int32_t>* next) {
  next->clear();
  const size_t n = output.size();
  for (const std::vector<int32_t>& choice : choices) {
    if (choice.size() < n || !std::equal(output.begin(), output.end(), choice.begin())) continue;
    const int32_t t = choice.size() > n ? choice[n] : end_token;
    if (t >= 0 && static_cast<size_t>(t) < vocab) next->push_back(t);
  }
}

void AddBadWordBans(const std::vector<std::vector<int32_t>>& bad_words,
                    absl::Span<const int32_t> output, std::vector<int32_t>* banned) {
  for (const std::vector<int32_t>& word : bad_words) {
    const size_t prefix = word.size() - 1;  // Validate(): every bad word has a token
    if (prefix <= output.size() &&
        std::equal(word.begin(), word.end() - 1, output.end() - prefix)) {
      banned->push_back(word.back());
    }
  }
}

void MaskToChoiceTokens(const std::vector<std::vector<int32_t>>& choices,
                        absl::Span<const int32_t> output, int32_t end_token,
                        absl::Span<float> logits, std::vector<int32_t>& kept,
                        std::vector<uint8_t>& seen) {
  ChoiceNextTokens(choices, output, end_token, logits.size(), &kept);
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
