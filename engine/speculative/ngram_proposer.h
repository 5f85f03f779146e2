// Draft tokens for speculative decoding by prompt lookup (n-gram matching): no draft model.
//
// A sequence's last n tokens are looked up earlier in the same sequence (prompt and output); the
// tokens that followed the most recent earlier occurrence are the draft. Text that quotes or
// repeats its context (summaries, edits of code, extraction, retrieval-augmented answers,
// greedy loops) drafts well; elsewhere nothing matches and nothing is drafted. The engine
// verifies drafts against the model's own samples, so a draft changes speed only, never tokens.
//
// Pure and stateless: safe to call from any thread.
#ifndef BLOSSOM_ENGINE_SPECULATIVE_NGRAM_PROPOSER_H_
#define BLOSSOM_ENGINE_SPECULATIVE_NGRAM_PROPOSER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace blossom {

struct NgramProposerConfig {
  int32_t num_speculative_tokens = 0;  // most draft tokens per step; 0 turns speculation off
  int32_t lookup_max = 4;              // longest suffix matched (tried first)
  int32_t lookup_min = 2;              // shortest suffix matched (1 drafts on every common token)
};

// InvalidArgument naming the field for negative counts, lookup_min < 1 or lookup_max <
// lookup_min (when num_speculative_tokens > 0).
absl::Status Validate(const NgramProposerConfig& config);

// Up to min(config.num_speculative_tokens, max_tokens) tokens that followed the most recent
// earlier occurrence of the longest suffix of `tokens` (lookup_max down to lookup_min tokens
// long) that occurs earlier; empty when none does. Where the history after the occurrence runs
// out, the draft goes on with the period the match implies (the occurrence is d tokens before
// the suffix, so draft token i repeats the token d before it): a loop drafts whole turns of
// itself. O(tokens * lookup_max).
std::vector<int32_t> ProposeNgramDraft(const NgramProposerConfig& config,
                                       absl::Span<const int32_t> tokens, int32_t max_tokens);

// One sequence's draft length, adapted to how its drafts fare (the "heuristic" schedule of
// Hugging Face transformers' assisted generation): it starts at the maximum, grows by 2 after a
// step whose drafts were all accepted and shrinks by 1 (not below 1) after one with a rejection,
// so a sequence whose drafts keep failing computes one draft row per step, not the maximum.
// Not thread-safe: one per sequence, on the engine thread.
class DraftLength {
 public:
  explicit DraftLength(int32_t max_tokens = 0) : max_(max_tokens), tokens_(max_tokens) {}
  int32_t tokens() const { return tokens_; }
  // After a step that verified `drafted` (> 0) draft tokens, `accepted` of them.
  void Observe(int32_t drafted, int32_t accepted);

 private:
  int32_t max_;
  int32_t tokens_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SPECULATIVE_NGRAM_PROPOSER_H_
