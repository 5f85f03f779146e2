#include "engine/guided/regex_dfa.h"

#include <random>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Whole-text match of ASCII `text` by the DFA.
bool DfaMatches(const RegexDfa& dfa, const std::string& text) {
  int32_t state = dfa.start;
  for (char c : text) {
    state = dfa.Step(state, static_cast<unsigned char>(c));
    if (state < 0) return false;
  }
  return dfa.accepting[state];
}

TEST(RegexDfaTest, FullMatchAgreesWithTheNfaAndSearchWithStdRegex) {
  std::mt19937 rng(9);
  const char* patterns[] = {"a(b|c)*d", "[0-9]{2,3}", "(ab|a)(c|bc)", "x?y+z*", "[^a]b",
                            "^ab", "ab$", "^a(b|c)$", "a|bc", ".a.", ""};
  int searched = 0;
  for (const char* p : patterns) {
    auto nfa = CompileRegex(p);
    auto full = CompileRegexDfa(p, /*search=*/false);
    auto search = CompileRegexDfa(p, /*search=*/true);
    ASSERT_TRUE(nfa.ok() && full.ok() && search.ok()) << p;
    RegexMatcher matcher(&*nfa);
    const std::regex oracle(p, std::regex::ECMAScript);
    for (int t = 0; t < 500; ++t) {
      std::string text;
      for (size_t n = rng() % 6; n > 0; --n) text += "abcdxyz01"[rng() % 9];
      RegexMatcher::State s = matcher.Start();
      const bool nfa_match = matcher.AdvanceAll(s, text) && matcher.CanEnd(s);
      ASSERT_EQ(DfaMatches(*full, text), nfa_match) << p << " '" << text << "'";
      const bool found = std::regex_search(text, oracle);
      ASSERT_EQ(DfaMatches(*search, text), found) << "search " << p << " '" << text << "'";
      searched += found;
    }
  }
  EXPECT_GT(searched, 500);  // both outcomes were exercised
}

TEST(RegexDfaTest, LiveRangesAndRefusals) {
  auto dfa = CompileRegexDfa("[a-c]é", /*search=*/false);
  ASSERT_TRUE(dfa.ok()) << dfa.status();
  EXPECT_TRUE(dfa->AnyLive(dfa->start, 'b', 'b'));
  EXPECT_FALSE(dfa->AnyLive(dfa->start, 'd', 0x10FFFF));
  const int32_t after = dfa->Step(dfa->start, 'a');
  ASSERT_GE(after, 0);
  EXPECT_TRUE(dfa->AnyLive(after, 0x80, 0x7FF));  // a two-byte character can still be é
  EXPECT_FALSE(dfa->AnyLive(after, 0x800, 0xFFFF));
  EXPECT_FALSE(CompileRegexDfa("^a|b", /*search=*/true).ok());
  EXPECT_FALSE(CompileRegexDfa("[]a]", /*search=*/true).ok());
  EXPECT_FALSE(CompileRegexDfa("[^]]", /*search=*/true).ok());
  EXPECT_TRUE(CompileRegexDfa("[\\]a]", /*search=*/true).ok());
  EXPECT_TRUE(CompileRegexDfa("^(a|b)", /*search=*/true).ok());
  EXPECT_TRUE(CompileRegexDfa("a|b", /*search=*/true).ok());
}

// A pattern whose DFA would take minutes and gigabytes is refused within the work budget.
TEST(RegexDfaTest, RefusesPatternsTooComplexToCompile) {
  auto dfa = CompileRegexDfa(R"(^(?:[\s\S]?){1000}$)", /*search=*/true);
  ASSERT_FALSE(dfa.ok());
  EXPECT_NE(std::string(dfa.status().message()).find("too complex"), std::string::npos)
      << dfa.status();
}

// The byte matcher never accepts a lead byte whose characters all lack a transition.
TEST(RegexDfaTest, MatcherReadsUtf8WithoutDeadEnds) {
  auto dfa = CompileRegexDfa("[a-z]+é?", /*search=*/false);
  ASSERT_TRUE(dfa.ok());
  RegexDfaMatcher matcher(&*dfa);
  RegexDfaMatcher::State s = matcher.Start();
  ASSERT_TRUE(matcher.AdvanceAll(s, "ab"));
  EXPECT_TRUE(matcher.CanEnd(s));
  RegexDfaMatcher::State t = s;
  EXPECT_TRUE(matcher.AdvanceAll(t, "\xC3"));  // é's lead byte
  EXPECT_FALSE(matcher.CanEnd(t));
  EXPECT_TRUE(matcher.AdvanceAll(t, "\xA9"));
  EXPECT_TRUE(matcher.CanEnd(t));
  RegexDfaMatcher::State u = s;
  EXPECT_FALSE(matcher.AdvanceAll(u, "\xC4")) << "no character from U+0100 on matches";
  RegexDfaMatcher::State v = s;
  EXPECT_FALSE(matcher.AdvanceAll(v, "\xE2"));
}

}  // namespace
}  // namespace blossom
