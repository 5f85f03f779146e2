// Verification of speculative drafts by sampling, shared by the serving engine and
// BatchGenerator.
//
// A decode entry with drafts has a logit row for its last token and one for each draft. Its
// first row is sampled like any decode row. Where the model sampled the draft itself, the
// entry's next row is sampled too, in a later round, with the context, penalties and generator
// draw a later step would have used for it: so speculation changes no token, logprob or seeded
// stream, only the number of steps. Each round's rows are sampled in one SampleBatch call (one
// device round trip per round, not per row).
#ifndef BLOSSOM_ENGINE_SPECULATIVE_DRAFT_ROUNDS_H_
#define BLOSSOM_ENGINE_SPECULATIVE_DRAFT_ROUNDS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "engine/sampling/batch_sampler.h"
#include "kernels/tensor.h"

namespace blossom {

// Whether the token sampled in `round` (round 0: the row before the first draft) is the draft
// of that round, so that the entry's verification goes on to its next row. A token that
// finished the sequence ends it (nothing after it may be kept).
bool DraftVerified(absl::Span<const int32_t> draft, size_t round, int32_t token, bool finished);

// The caller's decision on one sampled row: the entry (the caller's index, as given to
// SampleInRounds), the round, the row that was sampled, and its sample (the call's error when
// SampleBatch failed as a whole). Returns the entry's next row when its draft was verified,
// nullopt when its verification ends, or an error that stops SampleInRounds at once.
using RoundDecision = absl::FunctionRef<absl::StatusOr<absl::optional<SampleRow>>(
    size_t entry, size_t round, const SampleRow& row, absl::StatusOr<SampleResult> sample)>;

// Samples rows[i] (of entries[i]) and hands each to `decide`, in order; then the rows `decide`
// returned, round after round, until none is left. A row is not used after `decide` has seen it
// (the caller may end the request whose history it views). Returns `decide`'s first error.
// Adds the time spent in SampleBatch to *sample_seconds when given.
absl::Status SampleInRounds(BatchSampler& sampler, const Tensor& logits,
                            std::vector<size_t> entries, std::vector<SampleRow> rows,
                            RoundDecision decide, double* sample_seconds = nullptr);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SPECULATIVE_DRAFT_ROUNDS_H_
