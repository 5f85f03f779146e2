// Step 1 of sampler.h's order (the masks, the bans and logit_bias) as data, for a sampler that
// applies it where the logits are (the GPU sampler uploads it instead of bringing the row to the
// host). ApplyLogitEdits is its CPU twin: on any row it leaves exactly the row that Sample()'s
// step 1 leaves (logit_edits_test checks this against the host sampler's distributions).
//
// What step 1 does, as edits:
//   - one allow mask, the intersection of allowed_token_ids (plus the end token when the request
//     is guided, as the host restores it), guided choice's next tokens (logit_masks.h) and the
//     structured-output constraint's bitmask: every id whose bit is clear -> -inf;
//   - bans -> -inf: the last token of each bad word whose other tokens end the output, and the
//     suppressed tokens;
//   - then logit_bias added (-inf stays -inf).
#ifndef BLOSSOM_ENGINE_SAMPLING_LOGIT_EDITS_H_
#define BLOSSOM_ENGINE_SAMPLING_LOGIT_EDITS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/sampling/logits_processors.h"
#include "engine/sampling/sampling_params.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

struct LogitEdits {
  // Empty: no allow mask. Else exactly ceil(vocab / 64) words; bit t of word t / 64 clear masks
  // token t.
  TokenBitmask allowed;
  std::vector<int32_t> banned;  // in [0, vocab); may repeat
  std::vector<LogitBias> bias;  // distinct tokens in [0, vocab) (Validate())

  bool empty() const { return allowed.empty() && banned.empty() && bias.empty(); }
  void clear() {
    allowed.clear();
    banned.clear();
    bias.clear();
  }
};

// Whether step 1 can edit anything for this request (cheap: no constraint is consulted).
bool HasLogitEdits(const SamplingParams& params, const SamplingContext& ctx);

// The edits of step 1 for a row of `vocab` logits, into *edits (cleared first; its buffers are
// reused). `params` must pass Validate(params, vocab). Errors: InvalidArgument for a suppressed
// token outside the vocabulary; the constraint's own error (AllowedTokens).
absl::Status BuildLogitEdits(const SamplingParams& params, const SamplingContext& ctx,
                             int64_t vocab, LogitEdits* edits);

// Applies `edits` to `logits` (the CPU twin of the GPU sampler's edit kernel).
void ApplyLogitEdits(const LogitEdits& edits, absl::Span<float> logits);

// Whether a row of `vocab` logits keeps a token that `edits` neither masks nor bans. Step 1 is
// the only step that can remove every token (penalties and the samplers after it change finite
// logits and always keep one), so a row without one can only fail.
bool AnyTokenLeft(const LogitEdits& edits, int64_t vocab);

// FailedPrecondition, as Sample() would fail (NothingToSampleError's code), when the request's
// step 1 in context `ctx` leaves no token of `vocab`, naming the features that removed them; OK
// otherwise, and also when the edits cannot be built (a constraint's error belongs to the
// step that samples). For admission: a request whose first token is impossible is refused
// before it waits for its prefill.
absl::Status CheckSomeTokenPossible(const SamplingParams& params, const SamplingContext& ctx,
                                    int64_t vocab);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_LOGIT_EDITS_H_
