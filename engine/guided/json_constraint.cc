#include "engine/guided/json_constraint.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace blossom {

absl::StatusOr<std::shared_ptr<const JsonSchemaConstraint>> JsonSchemaConstraint::Create(
    absl::string_view schema_json, JsonGrammarOptions options,
    std::shared_ptr<const TokenVocabulary> vocabulary) {
  absl::StatusOr<JsonGrammar> grammar = CompileJsonSchema(schema_json, options);
  if (!grammar.ok()) return grammar.status();
  return std::shared_ptr<const JsonSchemaConstraint>(
      new JsonSchemaConstraint(*std::move(grammar), std::move(vocabulary)));
}

JsonSchemaConstraint::JsonSchemaConstraint(JsonGrammar grammar,
                                           std::shared_ptr<const TokenVocabulary> vocabulary)
    : grammar_(std::move(grammar)), matcher_(&grammar_), vocabulary_(std::move(vocabulary)) {}

absl::StatusOr<std::shared_ptr<const TokenBitmask>> JsonSchemaConstraint::AllowedTokens(
    absl::Span<const int32_t> output, int32_t end_token) const {
  JsonLinkArena arena;
  JsonState state = matcher_.Start();
  for (size_t i = 0; i < output.size(); ++i) {
    const absl::string_view bytes = vocabulary_->bytes(output[i]);
    if (bytes.empty() || !matcher_.AdvanceAll(state, bytes, arena)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output token ", i, " (id ", output[i], ") breaks the request's JSON schema"));
    }
  }
  std::string key(reinterpret_cast<const char*>(&end_token), sizeof(end_token));
  JsonMatcher::AppendKey(state, &key);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = masks_.find(key); it != masks_.end()) return it->second;
  }
  std::shared_ptr<const TokenBitmask> mask = ComputeMask(state, end_token, arena);
  absl::MutexLock lock(&mu_);
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  masks_.emplace(std::move(key), mask);
  return mask;
}

std::shared_ptr<const TokenBitmask> JsonSchemaConstraint::ComputeMask(const JsonState& state,
                                                                       int32_t end_token,
                                                                       JsonLinkArena& arena) const {
  masks_computed_.fetch_add(1, std::memory_order_relaxed);
  const TokenVocabulary& v = *vocabulary_;
  const size_t bits = std::max<size_t>(v.size(), end_token + 1);
  auto mask = std::make_shared<TokenBitmask>((bits + 63) / 64, 0);
  auto allow = [&](int32_t id) { (*mask)[id / 64] |= uint64_t{1} << (id % 64); };
  if (end_token >= 0 && matcher_.CanEnd(state, arena)) allow(end_token);
  // levels[d]: the state after the first d bytes of the current node's prefix.
  std::vector<JsonState> levels(v.max_depth() + 1);
  levels[0] = state;
  for (uint32_t i = 1; i < v.nodes();) {
    const uint32_t d = v.depth(i);
    matcher_.Advance(levels[d - 1], v.edge_byte(i), arena, &levels[d]);
    if (levels[d].empty()) {
      i = v.subtree_end(i);
      continue;
    }
    for (const int32_t* t = v.tokens_begin(i); t != v.tokens_end(i); ++t) allow(*t);
    ++i;
  }
  return mask;
}

absl::StatusOr<std::shared_ptr<const TokenConstraint>> JsonConstraintCache::Get(
    absl::string_view schema_json, JsonGrammarOptions options) {
  const std::string key = absl::StrCat(options.allow_whitespace ? "w" : "c", schema_json);
  std::shared_ptr<const TokenVocabulary> vocabulary;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if (it->first == key) {
        recent_.splice(recent_.begin(), recent_, it);
        return std::shared_ptr<const TokenConstraint>(recent_.front().second);
      }
    }
    if (vocabulary_ == nullptr) vocabulary_ = make_vocabulary_();
    vocabulary = vocabulary_;
  }
  // Compiled outside the lock: a large schema does not hold up requests with warm ones.
  absl::StatusOr<std::shared_ptr<const JsonSchemaConstraint>> constraint =
      JsonSchemaConstraint::Create(schema_json, options, std::move(vocabulary));
  if (!constraint.ok()) return constraint.status();
  absl::MutexLock lock(&mu_);
  recent_.emplace_front(key, *constraint);
  if (recent_.size() > capacity_) recent_.pop_back();
  return std::shared_ptr<const TokenConstraint>(*std::move(constraint));
}

}  // namespace blossom
