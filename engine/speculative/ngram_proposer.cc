#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace blossom {

absl::Status Validate(const NgramProposerConfig& config) {
  if (config.num_speculative_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_speculative_tokens must be >= 0, got ", config.num_speculative_tokens));
  }
  if (config.num_speculative_tokens == 0) return absl::OkStatus();
  if (config.lookup_min < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ngram lookup_min must be >= 1, got ", config.lookup_min));
  }
  if (config.lookup_max < config.lookup_min) {
    return absl::InvalidArgumentError(absl::StrCat("ngram lookup_max (", config.lookup_max,
                                                   ") must be >= lookup_min (", config.lookup_min,
                                                   ")"));
  }
  return absl::OkStatus();
}

std::vector<int32_t> ProposeNgramDraft(const NgramProposerConfig& config,
                                       absl::Span<const int32_t> tokens, int32_t max_tokens) {
  const int64_t want = std::min(config.num_speculative_tokens, max_tokens);
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (want <= 0 || config.lookup_min < 1) return {};
  // Longest suffix first: a longer match is a better predictor of what follows.
  for (int64_t n = std::min<int64_t>(config.lookup_max, size - 1); n >= config.lookup_min; --n) {
    const absl::Span<const int32_t> suffix = tokens.subspan(static_cast<size_t>(size - n));
    // Occurrences start at `start` < size - n (earlier than the suffix itself), newest first:
    // recent context predicts best.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      // The token at position p >= size is predicted to repeat the one `period` before it.
      const int64_t period = size - n - start;  // >= 1
      std::vector<int32_t> draft(static_cast<size_t>(want));
      for (int64_t i = 0; i < want; ++i) {
        const int64_t source = size + i - period;
        draft[static_cast<size_t>(i)] = source < size ? tokens[static_cast<size_t>(source)]
                                                      : draft[static_cast<size_t>(source - size)];
      }
      return draft;
    }
  }
  return {};
}

void DraftLength::Observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  tokens_ = accepted >= drafted ? std::min(max_, tokens_ + 2) : std::max(1, tokens_ - 1);
}

}  // namespace blossom
