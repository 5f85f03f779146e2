// Structured output by context-free grammar (vLLM's guided_grammar, llama.cpp's GBNF `grammar`):
// a TokenConstraint whose output is a whole `root` of the grammar (gbnf.h), ended by the end
// token. The output is read through a GrammarMatcher (from where the request's previous call
// left off: resume_cache.h) and the vocabulary trie walked from the state it reaches, masks
// cached by state (a repeat's states recur, so a list or free text costs one walk per distinct
// place in the grammar).
#ifndef BLOSSOM_ENGINE_GUIDED_GRAMMAR_CONSTRAINT_H_
#define BLOSSOM_ENGINE_GUIDED_GRAMMAR_CONSTRAINT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/guided/gbnf.h"
#include "engine/guided/grammar_matcher.h"
#include "engine/guided/resume_cache.h"
#include "engine/guided/token_mask.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

// What one call may cost (grammar_matcher.h's work: stacks stepped and expansion steps), for
// reading the output (from where the output's previous call left off, or from the start when no
// resume point is kept) and again for the trie walk: a free-text state of a JSON grammar steps
// 250k nodes x a few stacks, about 1M. Past it, or past kMaxGrammarLinks links made by the call,
// the request is refused (InvalidArgument) instead of holding up the sampler.
inline constexpr size_t kMaxGrammarCallWork = 8 << 20;
inline constexpr size_t kMaxGrammarLinks = 1 << 20;
// Where calls left off reading (resume_cache.h): a matcher is kept while its arena holds at most
// this many links (100-200 KiB with its index and expansions; a JSON grammar's matcher holds about
// 150 after its walks), for at most this many outputs (a batch's grammar requests), with states at
// the last kGrammarResumeCheckpoints lengths (a speculative round's drafts, beams' forks).
inline constexpr size_t kMaxResumedGrammarLinks = 1 << 12;
inline constexpr size_t kGrammarResumeEntries = 64;
inline constexpr size_t kGrammarResumeCheckpoints = 16;
// Masks are cached by a key of the state's whole stacks; a deeper state's mask is not cached,
// so a grammar's 128 cached keys stay small.
inline constexpr size_t kMaxGrammarKeyBytes = 4096;

// Thread-safe (see TokenConstraint): each call reads with a matcher of its own.
class GrammarConstraint : public TokenConstraint {
 public:
  // InvalidArgument naming the grammar's problem (gbnf.h), or a start past the matcher's bounds.
  static absl::StatusOr<std::shared_ptr<const GrammarConstraint>> Create(
      absl::string_view gbnf, std::shared_ptr<const TokenVocabulary> vocabulary);

  absl::StatusOr<std::shared_ptr<const TokenBitmask>> AllowedTokens(
      absl::Span<const int32_t> output, int32_t end_token) const override;

  int64_t masks_computed() const { return masks_.misses(); }

 private:
  GrammarConstraint(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

  using Resume = ResumeCache<GrammarMatcher, GrammarMatcher::State>;

  const Grammar grammar_;
  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  // Caches: filling them does not change what the constraint allows.
  mutable MaskCache masks_;
  mutable Resume resume_{kGrammarResumeEntries, kGrammarResumeCheckpoints};
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_GRAMMAR_CONSTRAINT_H_
