#include "engine/guided/fixture_vocabulary.h"

#include <cstdlib>

#include "engine/tokenizer/test_util.h"

namespace blossom {

const Tokenizer& FixtureTokenizer() {
  static const Tokenizer* tokenizer = [] {
    auto t = Tokenizer::FromFile(RunfilePath("tests/fixtures/tokenizer/tokenizer.json"));
    if (!t.ok()) std::abort();  // every test here needs it; the runfile is a data dependency
    return t->release();
  }();
  return *tokenizer;
}

std::shared_ptr<const TokenVocabulary> FixtureVocabulary() {
  static const auto* vocabulary = new std::shared_ptr<const TokenVocabulary>(
      TokenVocabulary::FromTokenizer(FixtureTokenizer()));
  return *vocabulary;
}

std::vector<int32_t> AllowedIds(const TokenBitmask& mask, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    if (TokenAllowed(mask, id)) ids.push_back(id);
  }
  return ids;
}

}  // namespace blossom
