#include "engine/guided/regex_constraint.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace blossom {

absl::StatusOr<std::shared_ptr<const RegexConstraint>> RegexConstraint::Create(
    absl::string_view pattern, std::shared_ptr<const TokenVocabulary> vocabulary) {
  absl::StatusOr<RegexDfa> dfa = CompileRegexDfa(pattern, /*search=*/false);
  if (!dfa.ok()) return dfa.status();
  return std::shared_ptr<const RegexConstraint>(
      new RegexConstraint(*std::move(dfa), std::move(vocabulary)));
}

RegexConstraint::RegexConstraint(RegexDfa dfa, std::shared_ptr<const TokenVocabulary> vocabulary)
    : dfa_(std::move(dfa)), matcher_(&dfa_), vocabulary_(std::move(vocabulary)) {}

absl::StatusOr<std::shared_ptr<const TokenBitmask>> RegexConstraint::AllowedTokens(
    absl::Span<const int32_t> output, int32_t end_token) const {
  RegexDfaMatcher::State state = matcher_.Start();
  for (size_t i = 0; i < output.size(); ++i) {
    const absl::string_view bytes = vocabulary_->bytes(output[i]);
    if (bytes.empty() || !matcher_.AdvanceAll(state, bytes)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output token ", i, " (id ", output[i], ") breaks the request's regex"));
    }
  }
  std::string key(reinterpret_cast<const char*>(&end_token), sizeof(end_token));
  RegexDfaMatcher::AppendKey(state, &key);
  return masks_.GetOrCompute(std::move(key), [&] {
    return WalkVocabulary(
        *vocabulary_, state, matcher_.CanEnd(state), end_token,
        [&](const RegexDfaMatcher::State& from, uint8_t byte, RegexDfaMatcher::State* to) {
          return matcher_.Advance(from, byte, to);
        });
  });
}

}  // namespace blossom
