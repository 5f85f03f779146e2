#include "engine/guided/grammar_matcher.h"

#include <random>
#include <string>

#include "engine/guided/gbnf.h"
#include "engine/guided/regex.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

// A compiled grammar and a matcher over it.
struct Compiled {
  explicit Compiled(const std::string& text) : grammar(CompileGbnf(text)) {
    EXPECT_TRUE(grammar.ok()) << text << ": " << grammar.status();
  }
  // -1: refused part-way; 0: a prefix of some text of the grammar; 1: a whole one.
  int Read(const std::string& text) {
    GrammarMatcher matcher(&*grammar);
    GrammarMatcher::State s = matcher.Start();
    if (!matcher.AdvanceAll(s, text)) return -1;
    return matcher.CanEnd(s) ? 1 : 0;
  }
  absl::StatusOr<Grammar> grammar;
};

TEST(GrammarMatcherTest, ReadsWholeTextsAndPrefixes) {
  Compiled g(R"g(root ::= greeting " " name "!"?
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]*)g");
  EXPECT_EQ(g.Read("hello Ada"), 1);
  EXPECT_EQ(g.Read("hi Bob!"), 1);
  EXPECT_EQ(g.Read("hel"), 0);
  EXPECT_EQ(g.Read("hi "), 0);
  EXPECT_EQ(g.Read(""), 0);
  EXPECT_EQ(g.Read("hi bob"), -1);
  EXPECT_EQ(g.Read("hey"), -1);
  EXPECT_EQ(g.Read("hi Bob!!"), -1);
}

// The language no regular expression has: balanced brackets, and arithmetic nested any depth.
TEST(GrammarMatcherTest, ContextFreeLanguages) {
  Compiled brackets(R"g(root ::= ( "(" root ")" | "[" root "]" )*)g");
  EXPECT_EQ(brackets.Read(""), 1);
  EXPECT_EQ(brackets.Read("([]())[[()]]"), 1);
  EXPECT_EQ(brackets.Read("(("), 0);
  EXPECT_EQ(brackets.Read("(]"), -1);
  EXPECT_EQ(brackets.Read("())"), -1);
  Compiled arithmetic(R"g(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor)g");
  EXPECT_EQ(arithmetic.Read("1+2*(3-4)/-5"), 1);
  EXPECT_EQ(arithmetic.Read("((((7))))"), 1);
  EXPECT_EQ(arithmetic.Read("(1+"), 0);
  EXPECT_EQ(arithmetic.Read("1+*2"), -1);
  EXPECT_EQ(arithmetic.Read("(1))"), -1);
}

TEST(GrammarMatcherTest, CharactersAreCodePointsReadAsUtf8) {
  Compiled g(R"g(root ::= [à-ÿ]{2} "→" .)g");
  EXPECT_EQ(g.Read("éü→x"), 1);
  EXPECT_EQ(g.Read("éü→😀"), 1);
  // A partly read character: the lead byte of é may start; one of a character outside the class
  // may not, and neither may a byte that starts no character.
  EXPECT_EQ(g.Read("\xC3"), 0);
  EXPECT_EQ(g.Read("\xE2"), -1);
  EXPECT_EQ(g.Read("\xFF"), -1);
  EXPECT_EQ(g.Read("e"), -1);
  EXPECT_EQ(g.Read("éü→\xF0\x9F"), 0);
  EXPECT_EQ(g.Read("éü→\xED\xA0\x80"), -1);  // a surrogate, which UTF-8 has no room for
}

// Regular grammars against the same language as a regex, on random strings over its alphabet:
// the NFA matcher (regex.h, itself checked against std::regex) is the oracle.
TEST(GrammarMatcherTest, RegularGrammarsAgreeWithTheRegexMatcher) {
  struct Pair {
    const char* gbnf;
    const char* regex;
  };
  const Pair pairs[] = {
      {"root ::= (\"ab\" | \"a\")* \"b\"?", "(ab|a)*b?"},
      {"root ::= [a-c]{2,4} (\"-\" [a-c]+)?", "[a-c]{2,4}(-[a-c]+)?"},
      {"root ::= x \"-\" x\nx ::= [0-9]{1,3}", "[0-9]{1,3}-[0-9]{1,3}"},
      {"root ::= ([ab] [^ab]?){,3} \"c\"*", "([ab][^ab]?){0,3}c*"},
      {"root ::= (\"a\" | \"aa\" | \"aaa\")+ \"b\"", "(a|aa|aaa)+b"},
  };
  std::mt19937 rng(7);
  const std::string alphabet = "abc-019";
  for (const Pair& pair : pairs) {
    Compiled g(pair.gbnf);
    absl::StatusOr<RegexNfa> nfa = CompileRegex(pair.regex);
    ASSERT_TRUE(nfa.ok()) << nfa.status();
    RegexMatcher regex(&*nfa);
    for (int i = 0; i < 3000; ++i) {
      std::string text;
      for (int n = rng() % 9; n > 0; --n) text += alphabet[rng() % alphabet.size()];
      RegexMatcher::State s = regex.Start();
      const bool regex_prefix = regex.AdvanceAll(s, text);
      const int want = !regex_prefix ? -1 : regex.CanEnd(s) ? 1 : 0;
      ASSERT_EQ(g.Read(text), want) << pair.gbnf << " on '" << text << "'";
    }
  }
}

// Repeats stay one link deep, so the states of a long list recur (and their masks are cached).
TEST(GrammarMatcherTest, RepeatsDoNotGrowTheStacks) {
  Compiled g(R"g(root ::= item ("," item)*
item ::= [a-z]+)g");
  GrammarMatcher matcher(&*g.grammar);
  GrammarMatcher::State s = matcher.Start();
  ASSERT_TRUE(matcher.AdvanceAll(s, "ab,c"));
  std::string short_key, long_key;
  ASSERT_TRUE(matcher.AppendKey(s, &short_key, 4096));
  std::string text;
  for (int i = 0; i < 500; ++i) text += ",abc";
  ASSERT_TRUE(matcher.AdvanceAll(s, text));
  ASSERT_TRUE(matcher.AppendKey(s, &long_key, 4096));
  EXPECT_EQ(short_key, long_key);
  // And the key is the same from another matcher, whatever ids its arena gave.
  GrammarMatcher other(&*g.grammar);
  GrammarMatcher::State t = other.Start();
  ASSERT_TRUE(other.AdvanceAll(t, "zz,yy,x"));
  std::string other_key;
  ASSERT_TRUE(other.AppendKey(t, &other_key, 4096));
  EXPECT_EQ(other_key, short_key);
}

TEST(GrammarMatcherTest, NestingPastTheDepthBoundIsNotGenerated) {
  Compiled g(R"g(root ::= "(" root ")" | "x")g");
  EXPECT_EQ(g.Read(std::string(500, '(') + "x" + std::string(500, ')')), 1);
  // Each level keeps one link (the ")" to read after it): past the bound the "(" is refused.
  EXPECT_EQ(g.Read(std::string(kMaxGrammarStackDepth - 1, '(')), 0);
  EXPECT_EQ(g.Read(std::string(kMaxGrammarStackDepth + 1, '(')), -1);
}

TEST(GrammarMatcherTest, AmbiguityPastTheStackBoundIsRefused) {
  // After n a's, each of the 2^n ways to close them is a stack of its own.
  Compiled g(R"g(root ::= s
s ::= "a" s "b" | "a" s "c" | "")g");
  // After 5, 2^5 ways times the 3 next characters (a, b, c): 96 stacks. After 6, 192.
  EXPECT_EQ(g.Read("aaaaabcbcb"), 1);
  EXPECT_EQ(g.Read("aaaaaa"), -1);
}

}  // namespace
}  // namespace blossom
