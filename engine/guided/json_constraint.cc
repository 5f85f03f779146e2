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
  return masks_.GetOrCompute(std::move(key), [&] {
    return WalkVocabulary(*vocabulary_, state, matcher_.CanEnd(state, arena), end_token,
                          [&](const JsonState& from, uint8_t byte, JsonState* to) {
                            matcher_.Advance(from, byte, arena, to);
                            return !to->empty();
                          });
  });
}

}  // namespace blossom
