// Step 1 of sampler.h's order, the masks: a row's logits -> -inf for every token outside a set
// (allowed_token_ids), outside the next tokens of the choices the output is still a prefix of
// (guided choice), or whose bit is clear (a TokenConstraint's mask). Internal to
// //engine/sampling:logits_processors, which calls them on its scratch's buffers.
#ifndef BLOSSOM_ENGINE_SAMPLING_LOGIT_MASKS_H_
#define BLOSSOM_ENGINE_SAMPLING_LOGIT_MASKS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

// Every logit not in `kept` -> -inf (ids in range; duplicates allowed). `seen` is vocab-sized
// scratch, all zero before and after.
void MaskAllTokensBut(absl::Span<const int32_t> kept, absl::Span<float> logits,
                      std::vector<uint8_t>& seen);

// Guided choice: every logit masked but the next token of each choice `output` is a prefix of,
// and `end_token` where the output is a whole choice. None left (the output left every choice,
// e.g. the end token was suppressed) leaves the row fully masked. `kept` and `seen` are scratch.
void MaskToChoiceTokens(const std::vector<std::vector<int32_t>>& choices,
                        absl::Span<const int32_t> output, int32_t end_token,
                        absl::Span<float> logits, std::vector<int32_t>& kept,
                        std::vector<uint8_t>& seen);

// Every logit whose bit in `allowed` is clear -> -inf. A word at a time: a structured output's
// mask is mostly all-set (inside a string) or all-clear words.
void MaskToAllowedBits(const TokenBitmask& allowed, absl::Span<float> logits);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_LOGIT_MASKS_H_
