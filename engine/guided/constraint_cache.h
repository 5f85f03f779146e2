// The compiled constraints (JSON schemas, regular expressions, GBNF grammars) of the structured-output requests
// a server saw last, by their text, over the server's vocabulary. Thread-safe.
#ifndef BLOSSOM_ENGINE_GUIDED_CONSTRAINT_CACHE_H_
#define BLOSSOM_ENGINE_GUIDED_CONSTRAINT_CACHE_H_

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/guided/json_grammar.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

class ConstraintCache {
 public:
  // `vocabulary` is called on first use (the trie of a 250k vocabulary takes a fraction of a
  // second), so servers that never see a grammar never pay for it.
  explicit ConstraintCache(std::function<std::shared_ptr<const TokenVocabulary>()> vocabulary,
                           size_t capacity = 16)
      : make_vocabulary_(std::move(vocabulary)), capacity_(capacity) {}

  // InvalidArgument naming the schema's, the pattern's or the grammar's problem.
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> JsonSchema(
      absl::string_view schema_json, JsonGrammarOptions options = {});
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> Regex(absl::string_view pattern);
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> Grammar(absl::string_view gbnf);

 private:
  using Compile = std::function<absl::StatusOr<std::shared_ptr<const TokenConstraint>>(
      std::shared_ptr<const TokenVocabulary>)>;
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> Get(std::string key,
                                                             const Compile& compile);

  std::function<std::shared_ptr<const TokenVocabulary>()> make_vocabulary_;
  const size_t capacity_;
  std::mutex mu_;  // std::mutex, not absl::Mutex: TSan sees it (server/metrics/metrics.h)
  std::shared_ptr<const TokenVocabulary> vocabulary_ ABSL_GUARDED_BY(mu_);
  // Most recent first, by kind, options and text.
  std::list<std::pair<std::string, std::shared_ptr<const TokenConstraint>>> recent_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_CONSTRAINT_CACHE_H_
