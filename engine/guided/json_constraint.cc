#include "engine/guided/json_constraint.h"

#include <string>
#include <utility>

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
  std::unique_ptr<Resume::Entry> entry = resume_.Take(output);
  if (entry == nullptr) {
    entry = std::make_unique<Resume::Entry>(JsonLinkArena());
    entry->checkpoints.push_back({0, matcher_.Start()});
  }
  JsonLinkArena& arena = entry->reader;
  JsonState state = entry->checkpoints.back().state;
  for (size_t i = entry->read.size(); i < output.size(); ++i) {
    const absl::string_view bytes = vocabulary_->bytes(output[i]);
    if (bytes.empty() || !matcher_.AdvanceAll(state, bytes, arena)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output token ", i, " (id ", output[i], ") breaks the request's JSON schema"));
    }
    resume_.Advance(*entry, output[i], state);
  }
  std::string key(reinterpret_cast<const char*>(&end_token), sizeof(end_token));
  JsonMatcher::AppendKey(state, &key);
  // The walk's frames go to an arena of its own, dropped after it: the kept arena holds only
  // what reading the output built.
  std::shared_ptr<const TokenBitmask> mask = masks_.GetOrCompute(std::move(key), [&] {
    JsonLinkArena walk_arena;
    return WalkVocabulary(*vocabulary_, state, matcher_.CanEnd(state, walk_arena), end_token,
                          [&](const JsonState& from, uint8_t byte, JsonState* to) {
                            matcher_.Advance(from, byte, walk_arena, to);
                            return !to->empty();
                          });
  });
  if (arena.size() <= kMaxResumedJsonLinks) resume_.Put(std::move(entry));
  return mask;
}

}  // namespace blossom
