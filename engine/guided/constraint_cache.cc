#include "engine/guided/constraint_cache.h"

#include "absl/strings/str_cat.h"
#include "engine/guided/grammar_constraint.h"
#include "engine/guided/json_constraint.h"
#include "engine/guided/regex_constraint.h"

namespace blossom {
namespace {

// A compiled constraint of any kind, as the cache keeps it.
template <typename T>
absl::StatusOr<std::shared_ptr<const TokenConstraint>> AsTokenConstraint(
    absl::StatusOr<std::shared_ptr<const T>> compiled) {
  if (!compiled.ok()) return compiled.status();
  return std::shared_ptr<const TokenConstraint>(*std::move(compiled));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TokenConstraint>> ConstraintCache::JsonSchema(
    absl::string_view schema_json, JsonGrammarOptions options) {
  return Get(absl::StrCat(options.allow_whitespace ? "json:" : "compact json:", schema_json),
             [&](std::shared_ptr<const TokenVocabulary> vocabulary) {
               return AsTokenConstraint(JsonSchemaConstraint::Create(schema_json, options, std::move(vocabulary)));
             });
}

absl::StatusOr<std::shared_ptr<const TokenConstraint>> ConstraintCache::Regex(
    absl::string_view pattern) {
  return Get(absl::StrCat("regex:", pattern),
             [&](std::shared_ptr<const TokenVocabulary> vocabulary) {
               return AsTokenConstraint(RegexConstraint::Create(pattern, std::move(vocabulary)));
             });
}

absl::StatusOr<std::shared_ptr<const TokenConstraint>> ConstraintCache::Grammar(
    absl::string_view gbnf) {
  return Get(absl::StrCat("gbnf:", gbnf),
             [&](std::shared_ptr<const TokenVocabulary> vocabulary) {
               return AsTokenConstraint(GrammarConstraint::Create(gbnf, std::move(vocabulary)));
             });
}

absl::StatusOr<std::shared_ptr<const TokenConstraint>> ConstraintCache::Get(
    std::string key, const Compile& compile) {
  std::shared_ptr<const TokenVocabulary> vocabulary;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if (it->first == key) {
        recent_.splice(recent_.begin(), recent_, it);
        return recent_.front().second;
      }
    }
    if (vocabulary_ == nullptr) vocabulary_ = make_vocabulary_();
    vocabulary = vocabulary_;
  }
  // Compiled outside the lock: a large schema does not hold up requests with warm ones.
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> constraint = compile(vocabulary);
  if (!constraint.ok()) return constraint.status();
  std::lock_guard<std::mutex> lock(mu_);
  recent_.emplace_front(std::move(key), *constraint);
  if (recent_.size() > capacity_) recent_.pop_back();
  return *constraint;
}

}  // namespace blossom
