// The command-line flags of speculative decoding, defined once for every binary that generates
// (blossom-server, blossom generate): --speculative_tokens, --ngram_lookup_max,
// --ngram_lookup_min (NgramProposerConfig).
#ifndef BLOSSOM_ENGINE_SPECULATIVE_SPECULATIVE_FLAGS_H_
#define BLOSSOM_ENGINE_SPECULATIVE_SPECULATIVE_FLAGS_H_

#include "absl/status/statusor.h"
#include "engine/speculative/ngram_proposer.h"

namespace blossom {

// The flags' values (after absl::ParseCommandLine), validated: InvalidArgument naming the field.
absl::StatusOr<NgramProposerConfig> NgramProposerConfigFromFlags();

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SPECULATIVE_SPECULATIVE_FLAGS_H_
