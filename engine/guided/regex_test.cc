#include "engine/guided/regex.h"

#include <random>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::HasSubstr;

class Pattern {
 public:
  explicit Pattern(const std::string& pattern) {
    auto nfa = CompileRegex(pattern);
    EXPECT_TRUE(nfa.ok()) << pattern << ": " << nfa.status();
    if (nfa.ok()) nfa_ = *std::move(nfa);
  }
  bool Matches(absl::string_view text) const {
    RegexMatcher::State s = matcher_.Start();
    return matcher_.AdvanceAll(s, text) && matcher_.CanEnd(s);
  }
  bool AllowsPrefix(absl::string_view text) const {
    RegexMatcher::State s = matcher_.Start();
    return matcher_.AdvanceAll(s, text);
  }

 private:
  RegexNfa nfa_;
  RegexMatcher matcher_{&nfa_};
};

TEST(RegexTest, Basics) {
  Pattern phone(R"(\(\d{3}\) \d{3}-\d{4})");
  EXPECT_TRUE(phone.Matches("(555) 123-4567"));
  EXPECT_FALSE(phone.Matches("(555) 123-456"));
  EXPECT_TRUE(phone.AllowsPrefix("(55"));
  EXPECT_FALSE(phone.AllowsPrefix("(5a"));
  Pattern anchored("^(yes|no|maybe)$");
  EXPECT_TRUE(anchored.Matches("maybe"));
  EXPECT_FALSE(anchored.Matches("may"));
  EXPECT_TRUE(anchored.AllowsPrefix("may"));
  Pattern named(R"((?P<year>\d{4})-(?<month>0[1-9]|1[0-2]))");
  EXPECT_TRUE(named.Matches("2026-11"));
  EXPECT_FALSE(named.Matches("2026-13"));
  Pattern lazy("a+?b*?c??");
  EXPECT_TRUE(lazy.Matches("aabbc"));
  Pattern dot("a.c");
  EXPECT_TRUE(dot.Matches("a€c"));
  EXPECT_FALSE(dot.Matches("a\nc"));
  Pattern braces("a{2,}b{,3}");  // Python's {,3}: at most 3
  EXPECT_TRUE(braces.Matches("aaabbb"));
  EXPECT_FALSE(braces.Matches("aab{,3}"));
  Pattern empty("");
  EXPECT_TRUE(empty.Matches(""));
  EXPECT_FALSE(empty.AllowsPrefix("a"));
}

TEST(RegexTest, ClassesAndUnicode) {
  Pattern word(R"([\w\-]+@[^\s@]+\.[a-z]{2,})");
  EXPECT_TRUE(word.Matches("a-b@example.org"));
  EXPECT_FALSE(word.Matches("a b@example.org"));
  Pattern greek("[α-ω]+");
  EXPECT_TRUE(greek.Matches("λόγος") == false);  // ό is outside α-ω
  EXPECT_TRUE(greek.Matches("λογος"));
  Pattern escapes(R"(\x41\u00e9[\]\\-])");
  EXPECT_TRUE(escapes.Matches("Aé]"));
  EXPECT_TRUE(escapes.Matches("Aé-"));
  EXPECT_TRUE(escapes.Matches("Aé\\"));
  Pattern negated("[^a-c]");
  EXPECT_TRUE(negated.Matches("😀"));
  EXPECT_FALSE(negated.Matches("b"));
  // Bytes that are not UTF-8 never match, and a character split over steps is read whole.
  EXPECT_FALSE(negated.AllowsPrefix("\xC0"));
  EXPECT_FALSE(negated.AllowsPrefix("\xED\xA0"));  // a surrogate
  EXPECT_TRUE(negated.AllowsPrefix("\xF0\x9F"));
  // A lead byte is refused where no character it starts can match: no dead ends.
  Pattern digits("\\d+");
  EXPECT_FALSE(digits.AllowsPrefix("1\xC3"));
  Pattern latin("[à-ÿ]");
  EXPECT_TRUE(latin.AllowsPrefix("\xC3"));
  EXPECT_FALSE(latin.AllowsPrefix("\xC4"));
  EXPECT_FALSE(latin.AllowsPrefix("\xE0"));
  Pattern astral("😀");
  EXPECT_TRUE(astral.AllowsPrefix("\xF0\x9F\x98"));
  EXPECT_FALSE(astral.AllowsPrefix("\xF0\x9F\x99"));
}

TEST(RegexTest, RefusesWhatItCannotMatchExactly) {
  for (const auto& [pattern, message] : std::vector<std::pair<std::string, std::string>>{
           {"(a)\\1", "backreferences"},
           {"a(?=b)", "lookaround"},
           {"(?i)a", "lookaround, flags"},
           {"\\bword", "word boundary"},
           {"a++", "possessive"},
           {"a**", "multiple repeat"},
           {"*a", "nothing to repeat"},
           {"a^b", "only supported at the start"},
           {"a$b", "only supported at the end"},
           {"(a", "unterminated ("},
           {"a)", "unbalanced"},
           {"[a", "unterminated ["},
           {"[z-a]", "out of order"},
           {"a{3,2}", "m < n"},
           {"a{1001}", "above 1000"},
           {"\\q", "\\q is not supported"},
           {"(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
            "((((((((((((((((((((((((((((a", "nest too deep"},
           {"(a{1000}){1000}", "states"},
           {"a[^\\x00-\\uffff\U00010000-\U0010FFFF]", "matches no character"},
           {"[\\uD800-\\uDFFF]", "surrogate"},
       }) {
    auto nfa = CompileRegex(pattern);
    ASSERT_FALSE(nfa.ok()) << pattern;
    EXPECT_EQ(nfa.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(nfa.status().message()), HasSubstr(message)) << pattern;
  }
}

TEST(RegexTest, AuditedEdges) {
  // Repeats of what matches only "" collapse instead of unrolling 10^15 empty copies.
  Pattern empties("(?:(?:(?:(?:(?:){1000}){1000}){1000}){1000}){1000}x{0}");
  EXPECT_TRUE(empties.Matches(""));
  EXPECT_FALSE(empties.AllowsPrefix("x"));
  // Counts past the limit are refused, not read as literal text; {,n} is Python's {0,n}.
  auto big = CompileRegex("x{20000}");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("above 1000"));
  Pattern upto(R"(\d{,3})");
  EXPECT_TRUE(upto.Matches("123"));
  EXPECT_TRUE(upto.Matches(""));
  EXPECT_FALSE(upto.Matches("5{,3}"));
  Pattern literal("a{,}");
  EXPECT_TRUE(literal.Matches("a{,}"));
  // Negated shorthands and . stay within what Python and ECMA-262 both accept.
  Pattern not_digit(R"(\D)");
  EXPECT_TRUE(not_digit.Matches("x"));
  EXPECT_FALSE(not_digit.Matches("\u0663"));  // ARABIC-INDIC DIGIT THREE
  EXPECT_FALSE(not_digit.Matches("é"));
  Pattern not_space(R"(\S)");
  EXPECT_FALSE(not_space.Matches("\u00a0"));
  Pattern dot(".");
  EXPECT_FALSE(dot.Matches("\r"));
  EXPECT_FALSE(dot.Matches("\u2028"));
  // The pattern's own UTF-8 is checked: a value past U+10FFFF is refused, not a dead end.
  auto bad = CompileRegex("a\xF4\x90\x80\x80");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("invalid UTF-8"));
}

// Random patterns and texts over a small alphabet: full matches agree with std::regex
// (ECMAScript), and every prefix of a match is allowed.
TEST(RegexTest, AgreesWithStdRegexOnRandomPatterns) {
  std::mt19937 rng(5);
  auto pick = [&](size_t n) { return rng() % n; };
  std::function<std::string(int)> pattern = [&](int depth) -> std::string {
    std::string out;
    for (size_t n = 1 + pick(3); n > 0; --n) {
      std::string atom;
      switch (depth > 2 ? pick(3) : pick(5)) {
        case 0: atom = std::string(1, "abc"[pick(3)]); break;
        case 1: atom = std::vector<std::string>{"[ab]", "[^a]", ".", "\\d", "[a-c0]"}[pick(5)]; break;
        case 2: atom = "x"; break;
        case 3: atom = "(" + pattern(depth + 1) + "|" + pattern(depth + 1) + ")"; break;
        default: atom = "(?:" + pattern(depth + 1) + ")"; break;
      }
      out += atom;
      // Unbounded repeats of groups only at the top level: std::regex backtracks exponentially
      // on nested ones.
      const char* quantifiers[] = {"", "", "?", "{2}", "{1,3}", "*", "+", "{0,}"};
      out += quantifiers[pick(atom.size() == 1 || depth == 0 ? 8 : 5)];
    }
    return out;
  };
  int matched = 0, checked = 0;
  for (int round = 0; round < 300; ++round) {
    const std::string p = pattern(0);
    Pattern ours(p);
    const std::regex theirs(p, std::regex::ECMAScript);
    for (int t = 0; t < 40; ++t) {
      std::string text;
      for (size_t n = pick(7); n > 0; --n) text += "abcx01"[pick(6)];
      const bool want = std::regex_match(text, theirs);
      ASSERT_EQ(ours.Matches(text), want) << "pattern " << p << " text '" << text << "'";
      ++checked;
      if (!want) continue;
      ++matched;
      for (size_t k = 0; k <= text.size(); ++k) {
        ASSERT_TRUE(ours.AllowsPrefix(text.substr(0, k))) << p << " '" << text << "' " << k;
      }
    }
  }
  EXPECT_EQ(checked, 12000);
  EXPECT_GT(matched, 1000);
}

}  // namespace
}  // namespace blossom
