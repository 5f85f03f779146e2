// Structured output by regular expression (vLLM's guided_regex, TGI's regex grammar): a
// TokenConstraint whose output is a whole match of the pattern, ended by the end token. The
// output is read through the pattern's DFA at every call (regex_dfa.h: one state, a table lookup
// a byte, so unlike the JSON and grammar matchers it needs no resume point) and the vocabulary
// trie walked from that state, masks cached by state.
#ifndef BLOSSOM_ENGINE_GUIDED_REGEX_CONSTRAINT_H_
#define BLOSSOM_ENGINE_GUIDED_REGEX_CONSTRAINT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/guided/regex_dfa.h"
#include "engine/guided/token_mask.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

// Thread-safe (see TokenConstraint).
class RegexConstraint : public TokenConstraint {
 public:
  // InvalidArgument naming the pattern's problem (regex.h).
  static absl::StatusOr<std::shared_ptr<const RegexConstraint>> Create(
      absl::string_view pattern, std::shared_ptr<const TokenVocabulary> vocabulary);

  absl::StatusOr<std::shared_ptr<const TokenBitmask>> AllowedTokens(
      absl::Span<const int32_t> output, int32_t end_token) const override;

  int64_t masks_computed() const { return masks_.misses(); }

 private:
  RegexConstraint(RegexDfa dfa, std::shared_ptr<const TokenVocabulary> vocabulary);

  const RegexDfa dfa_;
  const RegexDfaMatcher matcher_;
  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable MaskCache masks_;  // a cache: filling it does not change what the constraint allows
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_REGEX_CONSTRAINT_H_
