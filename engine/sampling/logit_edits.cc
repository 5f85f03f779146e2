#include "engine/sampling/logit_edits.h"

#include <algorithm>
#include <limits>

#include "engine/sampling/logit_masks.h"

namespace blossom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// mask &= the set of `tokens` (ids in range): only the listed ids that the mask allows stay.
void IntersectWith(absl::Span<const int32_t> tokens, TokenBitmask& mask) {
  std::vector<int32_t> kept;
  for (int32_t t : tokens) {
    if (TokenAllowed(mask, t)) kept.push_back(t);
  }
  std::fill(mask.begin(), mask.end(), 0);
  for (int32_t t : kept) mask[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
}

}  // namespace

bool HasLogitEdits(const SamplingParams& params, const SamplingContext& ctx) {
  return !params.allowed_token_ids.empty() || !params.choice_token_ids.empty() ||
         params.constraint != nullptr || !params.bad_words_token_ids.empty() ||
         !ctx.suppressed_tokens.empty() || !params.logit_bias.empty();
}

absl::Status BuildLogitEdits(const SamplingParams& params, const SamplingContext& ctx,
                             int64_t vocab, LogitEdits* edits) {
  edits->clear();
  const size_t n = static_cast<size_t>(vocab);
  absl::Status ids = CheckTokenIds(ctx.suppressed_tokens, "suppressed_tokens", n);
  if (!ids.ok()) return ids;
  const bool guided = !params.choice_token_ids.empty() || params.constraint != nullptr;
  if (!params.allowed_token_ids.empty() || guided) {
    const size_t words = static_cast<size_t>((vocab + 63) / 64);
    edits->allowed.assign(words, ~uint64_t{0});
    std::vector<int32_t> kept;
    if (!params.allowed_token_ids.empty()) {
      kept.assign(params.allowed_token_ids.begin(), params.allowed_token_ids.end());
      // As the host: a guided output can always end, whatever the allowed set says.
      if (guided && ctx.end_token >= 0 && ctx.end_token < vocab) kept.push_back(ctx.end_token);
      IntersectWith(kept, edits->allowed);
    }
    if (!params.choice_token_ids.empty()) {
      ChoiceNextTokens(params.choice_token_ids, ctx.output_tokens, ctx.end_token, n, &kept);
      IntersectWith(kept, edits->allowed);
    }
    if (params.constraint != nullptr) {
      absl::StatusOr<std::shared_ptr<const TokenBitmask>> allowed =
          params.constraint->AllowedTokens(ctx.output_tokens, ctx.end_token);
      if (!allowed.ok()) return allowed.status();
      const TokenBitmask& bits = **allowed;
      for (size_t w = 0; w < edits->allowed.size(); ++w) {
        edits->allowed[w] &= w < bits.size() ? bits[w] : 0;  // ids past its words: not allowed
      }
    }
  }
  AddBadWordBans(params.bad_words_token_ids, ctx.output_tokens, &edits->banned);
  edits->banned.insert(edits->banned.end(), ctx.suppressed_tokens.begin(),
                       ctx.suppressed_tokens.end());
  edits->bias.assign(params.logit_bias.begin(), params.logit_bias.end());
  return absl::OkStatus();
}

void ApplyLogitEdits(const LogitEdits& edits, absl::Span<float> logits) {
  const size_t vocab = logits.size();
  if (!edits.allowed.empty()) {
    for (size_t i = 0; i < vocab; ++i) {
      if (((edits.allowed[i / 64] >> (i % 64)) & 1u) == 0) logits[i] = -kInf;
    }
  }
  for (int32_t t : edits.banned) logits[static_cast<size_t>(t)] = -kInf;
  for (const LogitBias& b : edits.bias) logits[static_cast<size_t>(b.token)] += b.bias;
}

}  // namespace blossom
