// Structured output: a TokenConstraint that keeps the output a JSON text a JSON Schema allows
// (vLLM's guided_json and structured_outputs.json, OpenAI's response_format json_object and
// json_schema), and a cache of them by schema.
//
// At each step the output so far is read again through the JsonMatcher (stateless, as
// TokenConstraint requires; a few kilobytes at most), and the allowed tokens are found by walking
// the vocabulary trie from that state. Masks are cached by the matcher state, so that the steps
// inside a long string or a repeated array item cost a lookup; a warm schema costs nothing to
// compile again.
#ifndef BLOSSOM_ENGINE_GUIDED_JSON_CONSTRAINT_H_
#define BLOSSOM_ENGINE_GUIDED_JSON_CONSTRAINT_H_

#include <atomic>
#include <functional>
#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/guided/json_grammar.h"
#include "engine/guided/json_matcher.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

// Masks kept per constraint (each is vocabulary / 8 bytes: 31 KiB for BLOOM). Past it the cache
// starts again empty.
inline constexpr size_t kMaxCachedMasks = 128;

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
  int64_t masks_computed() const { return masks_computed_.load(std::memory_order_relaxed); }

 private:
  JsonSchemaConstraint(JsonGrammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

  std::shared_ptr<const TokenBitmask> ComputeMask(const JsonState& state, int32_t end_token,
                                                  JsonLinkArena& arena) const;

  const JsonGrammar grammar_;
  const JsonMatcher matcher_;
  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const TokenBitmask>> masks_
      ABSL_GUARDED_BY(mu_);
  mutable std::atomic<int64_t> masks_computed_{0};
};

// The constraints of the schemas used most recently, by schema text, over one vocabulary.
// Thread-safe.
class JsonConstraintCache {
 public:
  // `vocabulary` is built on first use (the trie of a 250k vocabulary takes a fraction of a
  // second), so servers that never see a schema never pay for it.
  JsonConstraintCache(std::function<std::shared_ptr<const TokenVocabulary>()> vocabulary,
                      size_t capacity = 16)
      : make_vocabulary_(std::move(vocabulary)), capacity_(capacity) {}

  absl::StatusOr<std::shared_ptr<const TokenConstraint>> Get(absl::string_view schema_json,
                                                              JsonGrammarOptions options = {});

 private:
  std::function<std::shared_ptr<const TokenVocabulary>()> make_vocabulary_;
  const size_t capacity_;
  absl::Mutex mu_;
  std::shared_ptr<const TokenVocabulary> vocabulary_ ABSL_GUARDED_BY(mu_);
  // Most recent first, by the options' flag and the schema's text.
  std::list<std::pair<std::string, std::shared_ptr<const JsonSchemaConstraint>>> recent_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_JSON_CONSTRAINT_H_
