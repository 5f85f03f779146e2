// Structured output as JSON: a TokenConstraint that keeps the output a JSON text a JSON Schema
// allows (vLLM's guided_json and structured_outputs.json, OpenAI's response_format json_object
// and json_schema, TGI's json grammar).
//
// At each step the output is read through the JsonMatcher from where the request's previous
// call left off (resume_cache.h; stateless in the output, as TokenConstraint requires: a call
// whose resume point is gone reads the whole output again), and the allowed tokens are found by
// walking the vocabulary trie from that state (token_mask.h). Masks are cached by the matcher
// state, so that the steps inside a long string or a repeated array item cost a lookup.
#ifndef BLOSSOM_ENGINE_GUIDED_JSON_CONSTRAINT_H_
#define BLOSSOM_ENGINE_GUIDED_JSON_CONSTRAINT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/guided/json_grammar.h"
#include "engine/guided/json_matcher.h"
#include "engine/guided/resume_cache.h"
#include "engine/guided/token_mask.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

// Where calls left off reading (resume_cache.h): an arena is kept while it holds at most this
// many frames (32 bytes each, 128 KiB in all; reading pushes one per value entered, not per
// byte), for at most this many outputs, with states at the last kJsonResumeCheckpoints lengths.
inline constexpr size_t kMaxResumedJsonLinks = 1 << 12;
inline constexpr size_t kJsonResumeEntries = 64;
inline constexpr size_t kJsonResumeCheckpoints = 16;

// Thread-safe (see TokenConstraint).
class JsonSchemaConstraint : public TokenConstraint {
 public:
  // InvalidArgument naming the schema's problem (json_grammar.h).
  static absl::StatusOr<std::shared_ptr<const JsonSchemaConstraint>> Create(
      absl::string_view schema_json, JsonGrammarOptions options,
      std::shared_ptr<const TokenVocabulary> vocabulary);

  absl::StatusOr<std::shared_ptr<const TokenBitmask>> AllowedTokens(
      absl::Span<const int32_t> output, int32_t end_token) const override;

  // Masks computed by walking the trie (not found in the cache), for tests and benchmarks.
  int64_t masks_computed() const { return masks_.misses(); }

 private:
  JsonSchemaConstraint(JsonGrammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

  const JsonGrammar grammar_;
  const JsonMatcher matcher_;
  using Resume = ResumeCache<JsonLinkArena, JsonState>;

  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  // Caches: filling them does not change what the constraint allows.
  mutable MaskCache masks_;
  mutable Resume resume_{kJsonResumeEntries, kJsonResumeCheckpoints};
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_JSON_CONSTRAINT_H_
