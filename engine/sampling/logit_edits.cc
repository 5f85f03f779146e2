#include "engine/sampling/logit_edits.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

bool AnyTokenLeft(const LogitEdits& edits, int64_t vocab) {
  if (vocab <= 0) return false;
  const absl::flat_hash_set<int32_t> banned(edits.banned.begin(), edits.banned.end());
  if (edits.allowed.empty()) return static_cast<int64_t>(banned.size()) < vocab;
  const size_t words = std::min(edits.allowed.size(), static_cast<size_t>((vocab + 63) / 64));
  for (size_t w = 0; w < words; ++w) {
    uint64_t bits = edits.allowed[w];
    const int64_t first = static_cast<int64_t>(w) * 64;
    if (vocab - first < 64) bits &= (uint64_t{1} << (vocab - first)) - 1;  // ids past vocab
    for (; bits != 0; bits &= bits - 1) {
      const int32_t token = static_cast<int32_t>(first + __builtin_ctzll(bits));
      if (!banned.contains(token)) return true;
    }
  }
  return false;
}

absl::Status CheckSomeTokenPossible(const SamplingParams& params, const SamplingContext& ctx,
                                    int64_t vocab) {
  if (!HasLogitEdits(params, ctx)) return absl::OkStatus();
  LogitEdits edits;
  if (!BuildLogitEdits(params, ctx, vocab, &edits).ok()) return absl::OkStatus();
  if (AnyTokenLeft(edits, vocab)) return absl::OkStatus();
  std::vector<std::string> removed;
  if (!params.allowed_token_ids.empty()) removed.push_back("allowed_token_ids");
  if (!params.choice_token_ids.empty()) removed.push_back("guided_choice");
  if (params.constraint != nullptr) removed.push_back("the structured-output constraint");
  if (!params.bad_words_token_ids.empty()) removed.push_back("bad_words");
  if (!ctx.suppressed_tokens.empty()) {
    removed.push_back("min_new_tokens (no end or stop token before it)");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no token can be sampled: ", absl::StrJoin(removed, " and "),
                   " leave no token of the vocabulary to choose from"));
}

}  // namespace blossom
