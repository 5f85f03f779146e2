// Test support: the fixture tokenizer (tests/fixtures/tokenizer, a 2,000-token byte-level BPE
// with BLOOM's special tokens) and its TokenVocabulary, loaded once per test binary.
#ifndef BLOSSOM_ENGINE_GUIDED_FIXTURE_VOCABULARY_H_
#define BLOSSOM_ENGINE_GUIDED_FIXTURE_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"
#include "engine/tokenizer/tokenizer.h"

namespace blossom {

// The fixture tokenizer's EOS id.
inline constexpr int32_t kFixtureEos = 2;

const Tokenizer& FixtureTokenizer();
std::shared_ptr<const TokenVocabulary> FixtureVocabulary();

// The ids a mask allows, ascending.
std::vector<int32_t> AllowedIds(const TokenBitmask& mask, int32_t vocab);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_FIXTURE_VOCABULARY_H_
