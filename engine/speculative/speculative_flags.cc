#include "engine/speculative/speculative_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int32_t, speculative_tokens, 0,
          "Speculative decoding by prompt lookup: draft up to N tokens per step from earlier "
          "text of the same sequence and verify them in one step (0 = off). Same tokens either "
          "way; faster where outputs repeat their context.");
ABSL_FLAG(int32_t, ngram_lookup_max, 4, "Longest suffix matched for --speculative_tokens.");
ABSL_FLAG(int32_t, ngram_lookup_min, 2,
          "Shortest suffix matched for --speculative_tokens (1 also drafts after any repeated "
          "single token: mostly wrong drafts in free text).");

namespace blossom {

absl::StatusOr<NgramProposerConfig> NgramProposerConfigFromFlags() {
  NgramProposerConfig config;
  config.num_speculative_tokens = absl::GetFlag(FLAGS_speculative_tokens);
  config.lookup_max = absl::GetFlag(FLAGS_ngram_lookup_max);
  config.lookup_min = absl::GetFlag(FLAGS_ngram_lookup_min);
  if (absl::Status valid = Validate(config); !valid.ok()) return valid;
  return config;
}

}  // namespace blossom
