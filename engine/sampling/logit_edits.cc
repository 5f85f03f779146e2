#include "engine/sampling/logit_edits.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace blossom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool EndsWith(absl::Span<const int32_t> tokens, absl::Span<const int32_t> suffix) {
  return suffix.size() <= tokens.size() &&
         std::equal(suffix.begin(), suffix.end(), tokens.end() - suffix.size());
}

void SetBit(TokenBitmask& mask, int32_t token) {
  mask[static_cast<size_t>(token) / 64] |= uint64_t{1} << (token % 64);
}

// mask &= the bitmask holding exactly `tokens` (ids in range).
void IntersectWith(absl::Span<const int32_t> tokens, TokenBitmask& mask, TokenBitmask& scratch) {
  scratch.assign(mask.size(), 0);
  for (int32_t t : tokens) SetBit(scratch, t);
  for (size_t w = 0; w < mask.size(); ++w) mask[w] &= scratch[w];
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
  for (size_t i = 0; i < ctx.suppressed_tokens.size(); ++i) {
    const int32_t t = ctx.suppressed_tokens[i];
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "suppressed_tokens[", i, "] = ", t, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  const bool guided = !params.choice_token_ids.empty() || params.constraint != nullptr;
  if (!params.allowed_token_ids.empty() || guided) {
    const size_t words = static_cast<size_t>((vocab + 63) / 64);
    edits->allowed.assign(words, ~uint64_t{0});
    TokenBitmask scratch;
    if (!params.allowed_token_ids.empty()) {
      std::vector<int32_t> kept(params.allowed_token_ids.begin(), params.allowed_token_ids.end());
      // As the host: a guided output can always end, whatever the allowed set says.
      if (guided && ctx.end_token >= 0 && ctx.end_token < vocab) kept.push_back(ctx.end_token);
      IntersectWith(kept, edits->allowed, scratch);
    }
    if (!params.choice_token_ids.empty()) {
      // logit_masks.h's MaskToChoiceTokens: the next token of each choice the output is a prefix
      // of, the end token after a whole choice.
      std::vector<int32_t> next;
      const size_t n = ctx.output_tokens.size();
      for (const std::vector<int32_t>& choice : params.choice_token_ids) {
        if (choice.size() < n ||
            !std::equal(ctx.output_tokens.begin(), ctx.output_tokens.end(), choice.begin())) {
          continue;
        }
        const int32_t t = choice.size() > n ? choice[n] : ctx.end_token;
        if (t >= 0 && t < vocab) next.push_back(t);
      }
      IntersectWith(next, edits->allowed, scratch);
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
  for (const std::vector<int32_t>& word : params.bad_words_token_ids) {
    if (EndsWith(ctx.output_tokens, absl::MakeConstSpan(word.data(), word.size() - 1))) {
      edits->banned.push_back(word.back());
    }
  }
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
