// Step 1 of sampler.h's order, the masks: a row's logits -> -inf for every token outside a set
// (allowed_token_ids), outside the next tokens of the choices the output is still a prefix of
// (guided choice), whose bit is clear (a TokenConstraint's mask), or that ends a bad word. The
// rules that pick the tokens (ChoiceNextTokens, AddBadWordBans) are shared by the host's
// processors (//engine/sampling:logits_processors) and the GPU's edits (logit_edits), so both
// apply one definition.
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

// Guided choice's allowed tokens, into *next (cleared first): the next token of each choice
// `output` is a prefix of, and `end_token` where the output is a whole choice; ids outside
// [0, vocab) are left out.
void ChoiceNextTokens(const std::vector<std::vector<int32_t>>& choices,
                      absl::Span<const int32_t> output, int32_t end_token, size_t vocab,
                      std::vector<int32_t>* next);

// Appends to *banned the last token of each bad word whose other tokens end `output`.
void AddBadWordBans(const std::vector<std::vector<int32_t>>& bad_words,
                    absl::Span<const int32_t> output, std::vector<int32_t>* banned);

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
