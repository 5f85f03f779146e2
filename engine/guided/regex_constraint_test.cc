#include "engine/guided/regex_constraint.h"

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "engine/guided/fixture_vocabulary.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

// UTF-8 -> code points, for std::wregex (wchar_t is 32-bit here), which counts characters as
// the matcher does; std::regex would count bytes.
std::wstring Wide(const std::string& utf8) {
  std::wstring out;
  for (size_t i = 0; i < utf8.size();) {
    const unsigned char c = utf8[i];
    const int n = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = n == 0 ? c : c & (0x3F >> n);
    for (int k = 1; k <= n; ++k) cp = (cp << 6) | (utf8[i + k] & 0x3F);
    out.push_back(static_cast<wchar_t>(cp));
    i += n + 1;
  }
  return out;
}

// Random walks through the allowed tokens of a pattern: each mask is the brute-force set (every
// token whose bytes the matcher reads from the state), and every walk that ends is a match.
TEST(RegexConstraintTest, MasksAreTheBruteForceSetsAndEndedOutputsMatch) {
  const int32_t vocab = FixtureTokenizer().vocab_size();
  for (const char* pattern : {R"(\d{3}-[a-z]+( [A-Z][a-z]*)?)", "(yes|no|maybe)!?",
                              R"([^"]{0,12}\.)", "(ab|a|the server)+"}) {
    auto nfa = CompileRegex(pattern);
    ASSERT_TRUE(nfa.ok()) << nfa.status();
    RegexMatcher matcher(&*nfa);
    auto constraint = RegexConstraint::Create(pattern, FixtureVocabulary());
    ASSERT_TRUE(constraint.ok()) << constraint.status();
    std::mt19937 rng(3);
    int ended = 0;
    for (int walk = 0; walk < 30; ++walk) {
      std::vector<int32_t> output;
      std::string text;
      for (int step = 0; step < 40; ++step) {
        auto mask = (*constraint)->AllowedTokens(output, kFixtureEos);
        ASSERT_TRUE(mask.ok()) << mask.status();
        RegexMatcher::State state = matcher.Start();
        ASSERT_TRUE(matcher.AdvanceAll(state, text));
        for (int32_t id = 0; id < vocab; ++id) {
          const absl::string_view bytes = FixtureVocabulary()->bytes(id);
          RegexMatcher::State s = state;
          const bool want = id == kFixtureEos ? matcher.CanEnd(state)
                                              : !bytes.empty() && matcher.AdvanceAll(s, bytes);
          ASSERT_EQ(TokenAllowed(**mask, id), want)
              << pattern << ": token " << id << " '" << bytes << "' after '" << text << "'";
        }
        const std::vector<int32_t> allowed = AllowedIds(**mask, vocab);
        ASSERT_FALSE(allowed.empty()) << pattern << " after '" << text << "'";
        int32_t next = allowed[rng() % allowed.size()];
        if (TokenAllowed(**mask, kFixtureEos) && rng() % 3 == 0) next = kFixtureEos;
        if (next == kFixtureEos) {
          EXPECT_TRUE(std::regex_match(Wide(text), std::wregex(Wide(pattern))))
              << pattern << ": " << text;
          ++ended;
          break;
        }
        output.push_back(next);
        text += std::string(FixtureVocabulary()->bytes(next));
      }
    }
    EXPECT_GT(ended, 5) << pattern;
  }
}

TEST(RegexConstraintTest, AnOutputOutsideThePatternIsFailedPrecondition) {
  auto constraint = RegexConstraint::Create("[0-9]+", FixtureVocabulary());
  ASSERT_TRUE(constraint.ok());
  auto ids = FixtureTokenizer().Encode("12a");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*constraint)->AllowedTokens(*ids, kFixtureEos).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace blossom
