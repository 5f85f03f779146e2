#include "engine/guided/gbnf.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom {
namespace {

using Kind = Grammar::Kind;

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<Grammar> g = CompileGbnf(text);
  EXPECT_FALSE(g.ok()) << text;
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(g.status().message());
}

TEST(GbnfTest, RulesAlternativesAndLiteralsCompileToFlatElements) {
  absl::StatusOr<Grammar> g = CompileGbnf("root ::= \"ab\" | item\nitem ::= [x-z]");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->rules.size(), 2u);
  EXPECT_EQ(g->rules[g->root].name, "root");
  const Grammar::Rule& root = g->rules[g->root];
  ASSERT_EQ(root.alternatives.size(), 2u);
  // "ab": two one-character classes, then the end.
  const int32_t a = root.alternatives[0];
  ASSERT_EQ(g->elements[a].kind, Kind::kClass);
  EXPECT_EQ(g->classes[g->elements[a].index], (CodePointClass{{'a', 'a'}}));
  EXPECT_EQ(g->classes[g->elements[a + 1].index], (CodePointClass{{'b', 'b'}}));
  EXPECT_EQ(g->elements[a + 2].kind, Kind::kEnd);
  const int32_t b = root.alternatives[1];
  ASSERT_EQ(g->elements[b].kind, Kind::kRule);
  EXPECT_EQ(g->rules[g->elements[b].index].name, "item");
  const Grammar::Rule& item = g->rules[g->elements[b].index];
  EXPECT_EQ(g->classes[g->elements[item.alternatives[0]].index], (CodePointClass{{'x', 'z'}}));
}

TEST(GbnfTest, ClassesNegateMergeAndLeaveOutSurrogates) {
  absl::StatusOr<Grammar> g = CompileGbnf(R"(root ::= [^a-c\n] [c-eb-d] . "\u00e9\x41\U0001F600")");
  ASSERT_TRUE(g.ok()) << g.status();
  const int32_t p = g->rules[g->root].alternatives[0];
  EXPECT_EQ(g->classes[g->elements[p].index],
            (CodePointClass{{0, 9}, {11, 'a' - 1}, {'c' + 1, 0xD7FF}, {0xE000, 0x10FFFF}}));
  EXPECT_EQ(g->classes[g->elements[p + 1].index], (CodePointClass{{'b', 'e'}}));
  EXPECT_EQ(g->classes[g->elements[p + 2].index], (CodePointClass{{0, 0xD7FF}, {0xE000, 0x10FFFF}}));
  EXPECT_EQ(g->classes[g->elements[p + 3].index], (CodePointClass{{0xE9, 0xE9}}));
  EXPECT_EQ(g->classes[g->elements[p + 4].index], (CodePointClass{{'A', 'A'}}));
  EXPECT_EQ(g->classes[g->elements[p + 5].index], (CodePointClass{{0x1F600, 0x1F600}}));
}

TEST(GbnfTest, RulesMaySpanLinesAndCarryComments) {
  // llama.cpp needs the trailing `|`; xgrammar-style grammars put it at the start of a line.
  EXPECT_TRUE(CompileGbnf("# a comment\nroot ::= a |\n  b\n  | c # why\na ::= \"a\"\nb ::= "
                          "\"b\"\nc ::= (\n \"c\"\n)")
                  .ok());
}

TEST(GbnfTest, RepeatsBecomeRulesWithinTheBounds) {
  EXPECT_TRUE(CompileGbnf("root ::= \"ab\"* [0-9]+ \"x\"? [a]{2} [b]{1,} [c]{,3} [d]{2,5}").ok());
  EXPECT_TRUE(CompileGbnf("root ::= [a]{1000}").ok());
  EXPECT_NE(ErrorOf("root ::= [a]{1001}").find("a repeat count above 1000"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [a]{3,2}").find("maximum is below its minimum"), std::string::npos);
  // A repeat of a repeat is a rule repeated: linear in the counts, not their product.
  EXPECT_TRUE(CompileGbnf("root ::= (([a]{1000}){1000}){1000}").ok());
  std::string many = "root ::=";
  for (int i = 0; i < 140; ++i) many += " [a]{1000}";
  EXPECT_NE(ErrorOf(many).find("more than 131072 elements"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [a]{x}").find("expected a count"), std::string::npos);
}

TEST(GbnfTest, RefusalsNameTheProblem) {
  EXPECT_NE(ErrorOf("").find("no rules"), std::string::npos);
  EXPECT_NE(ErrorOf("item ::= \"a\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= item").find("rule 'item' is used but not defined"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"\nroot ::= \"b\"").find("rule 'root' is defined twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root = \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a").find("closing '\"'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [a").find("closing ']'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= (\"a\"").find("expected ')'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\")").find("unexpected ')'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [z-a]").find("end comes before its start"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [^\\x00-\\U0010FFFF]").find("matches no character"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\uD800\"").find("not a Unicode scalar value"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= * \"a\"").find("unexpected '*'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\xff\"").find("not UTF-8"), std::string::npos);
  EXPECT_NE(ErrorOf(std::string(65 << 10, ' ')).find("longer than"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= " + std::string(65, '(') + "\"a\"" + std::string(65, ')'))
                .find("groups nest deeper"),
            std::string::npos);
  // The error says where.
  EXPECT_NE(ErrorOf("root ::= \"a\" ! \"b\"").find("grammar at byte 13"), std::string::npos);
}

// Nullable and finite propagate through chains of rules defined before the rules they use.
TEST(GbnfTest, LongRuleChainsAreAnalysedWhateverTheirOrder) {
  std::string chain = "root ::= r0 \"!\"\n";
  for (int i = 0; i < 3000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  EXPECT_TRUE(CompileGbnf(chain + "r3000 ::= \"y\"").ok());
  // The end of the chain matches "": so does every rule of it, and a repeat of r0 is
  // left-recursive.
  std::string nullable = chain + "r3000 ::= \"\"\n";
  absl::StatusOr<Grammar> g = CompileGbnf(nullable);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NE(ErrorOf(nullable + "loop ::= r0* \"z\"").find("left-recursive"), std::string::npos);
  // And one that can never finish, at the chain's end.
  EXPECT_NE(ErrorOf(chain + "r3000 ::= \"y\" r3000").find("can never finish"), std::string::npos);
}

// Errors quote whole characters: they travel in protobuf strings, which must be UTF-8.
TEST(GbnfTest, ErrorsQuoteWholeCharacters) {
  EXPECT_NE(ErrorOf("root ::= \xC3\xA9").find("unexpected '\xC3\xA9'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\\xC3\xA9\"").find("unknown escape '\\\xC3\xA9'"),
            std::string::npos);
}

TEST(GbnfTest, LeftRecursionIsRefusedNamingTheRule) {
  EXPECT_NE(ErrorOf("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]")
                .find("rule 'expr' is left-recursive"),
            std::string::npos);
  // Through a rule that can be empty, and a repeat of what can be empty.
  EXPECT_NE(ErrorOf("root ::= ws root \"a\" | \"b\"\nws ::= \" \"*").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);
  // Right recursion and recursion after a character are fine.
  EXPECT_TRUE(CompileGbnf("root ::= \"(\" root \")\" root | \"\"").ok());
}

TEST(GbnfTest, ARuleThatCanNeverFinishIsRefused) {
  EXPECT_NE(ErrorOf("root ::= \"a\" | loop\nloop ::= \"b\" loop").find("rule 'loop' can never "
                                                                       "finish"),
            std::string::npos);
  // One the output cannot reach is left alone.
  EXPECT_TRUE(CompileGbnf("root ::= \"a\"\nunused ::= \"b\" unused").ok());
}

}  // namespace
}  // namespace blossom
