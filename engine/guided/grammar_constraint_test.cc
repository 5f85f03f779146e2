#include "engine/guided/grammar_constraint.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/guided/fixture_vocabulary.h"
#include "engine/guided/grammar_matcher.h"
#include "engine/guided/interleaved_walks.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

// JSON in GBNF, as users of llama.cpp's json.gbnf write it (whitespace bounded so that random
// walks end).
constexpr char kJsonGrammar[] = R"g(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ws ( "," ws string ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) ){0,8} "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,5} ) ( "." [0-9]{1,4} )? ( [eE] [-+]? [0-9]{1,2} )?
ws     ::= [ \t\n]{0,2}
)g";

// Random walks through the allowed tokens: each mask is the brute-force set (every token whose
// bytes a matcher reads from the output's state), and every walk that ends is a whole text.
void WalkAndCheck(const std::string& gbnf, int walks, int steps,
                  const std::function<void(const std::string&)>& check_ended) {
  const int32_t vocab = FixtureTokenizer().vocab_size();
  absl::StatusOr<Grammar> grammar = CompileGbnf(gbnf);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  auto constraint = GrammarConstraint::Create(gbnf, FixtureVocabulary());
  ASSERT_TRUE(constraint.ok()) << constraint.status();
  std::mt19937 rng(11);
  int ended = 0;
  for (int walk = 0; walk < walks; ++walk) {
    std::vector<int32_t> output;
    std::string text;
    for (int step = 0; step < steps; ++step) {
      auto mask = (*constraint)->AllowedTokens(output, kFixtureEos);
      ASSERT_TRUE(mask.ok()) << mask.status();
      GrammarMatcher matcher(&*grammar);
      GrammarMatcher::State state = matcher.Start();
      ASSERT_TRUE(matcher.AdvanceAll(state, text));
      for (int32_t id = 0; id < vocab; ++id) {
        const absl::string_view bytes = FixtureVocabulary()->bytes(id);
        GrammarMatcher::State s = state;
        const bool want = id == kFixtureEos ? matcher.CanEnd(state)
                                            : !bytes.empty() && matcher.AdvanceAll(s, bytes);
        ASSERT_EQ(TokenAllowed(**mask, id), want)
            << "token " << id << " '" << bytes << "' after '" << text << "'";
      }
      const std::vector<int32_t> allowed = AllowedIds(**mask, vocab);
      ASSERT_FALSE(allowed.empty()) << "after '" << text << "'";
      int32_t next = allowed[rng() % allowed.size()];
      if (TokenAllowed(**mask, kFixtureEos) && rng() % 2 == 0) next = kFixtureEos;
      if (next == kFixtureEos) {
        check_ended(text);
        ++ended;
        break;
      }
      output.push_back(next);
      text += std::string(FixtureVocabulary()->bytes(next));
    }
  }
  EXPECT_GT(ended, walks / 4);
}

TEST(GrammarConstraintTest, EndedJsonOutputsParse) {
  WalkAndCheck(kJsonGrammar, 12, 120, [](const std::string& text) {
    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
    EXPECT_EQ(text.front(), '{') << text;
  });
}

TEST(GrammarConstraintTest, EndedArithmeticOutputsAreBalanced) {
  WalkAndCheck(R"g(root ::= expr
expr ::= term (("+" | "-") term){0,3}
term ::= [0-9]{1,3} | "(" expr ")")g",
               20, 60, [](const std::string& text) {
                 int depth = 0;
                 for (char c : text) {
                   depth += c == '(' ? 1 : c == ')' ? -1 : 0;
                   ASSERT_GE(depth, 0) << text;
                 }
                 EXPECT_EQ(depth, 0) << text;
               });
}

// A batch's outputs through one constraint, each call resuming where that output's reading left
// off (or going back): every mask is the one a fresh constraint gives.
TEST(GrammarConstraintTest, InterleavedOutputsGetTheMasksOfAFreshConstraint) {
  auto shared = GrammarConstraint::Create(kJsonGrammar, FixtureVocabulary());
  ASSERT_TRUE(shared.ok()) << shared.status();
  ExpectInterleavedCallsMatchFresh(
      **shared, [] { return *GrammarConstraint::Create(kJsonGrammar, FixtureVocabulary()); }, 5,
      400, 3);
}

// Several sampling threads on one constraint: each takes a kept reading out while it reads with
// it, so no two use one matcher at once (TSan checks this).
TEST(GrammarConstraintTest, ThreadsShareOneConstraint) {
  auto shared = GrammarConstraint::Create(kJsonGrammar, FixtureVocabulary());
  ASSERT_TRUE(shared.ok()) << shared.status();
  std::vector<std::thread> threads;
  for (uint32_t seed = 0; seed < 4; ++seed) {
    threads.emplace_back([&, seed] {
      ExpectInterleavedCallsMatchFresh(
          **shared, [] { return *GrammarConstraint::Create(kJsonGrammar, FixtureVocabulary()); },
          3, 100, seed);
    });
  }
  for (std::thread& t : threads) t.join();
}

// A long free text costs one walk per distinct place in the grammar: its states recur.
TEST(GrammarConstraintTest, RepeatedStatesHitTheMaskCache) {
  auto constraint = GrammarConstraint::Create(R"g(root ::= [a-z ]* ".")g", FixtureVocabulary());
  ASSERT_TRUE(constraint.ok()) << constraint.status();
  auto ids = FixtureTokenizer().Encode("the server reads the model and the tokenizer");
  ASSERT_TRUE(ids.ok());
  for (size_t n = 0; n <= ids->size(); ++n) {
    auto mask = (*constraint)->AllowedTokens(absl::MakeConstSpan(ids->data(), n), kFixtureEos);
    ASSERT_TRUE(mask.ok()) << mask.status();
  }
  EXPECT_EQ((*constraint)->masks_computed(), 1);
}

// A grammar whose empty alternatives multiply (2^14 ways through `e`) under a palindrome whose
// every prefix is a new state: each expansion visits its (position, stack) pairs once, so a
// step costs the pairs, not the derivations.
TEST(GrammarConstraintTest, EmptyAlternativesCostTheirPairsNotTheirDerivations) {
  std::string gbnf = "root ::= e";
  for (char c = 'a'; c <= 'z'; ++c) gbnf += std::string(" | \"") + c + "\" root \"" + c + "\"";
  gbnf += "\ne ::= n n n n n n n n n n n n n n\nn ::= \"\" | \"\"\n";
  auto constraint = GrammarConstraint::Create(gbnf, FixtureVocabulary());
  ASSERT_TRUE(constraint.ok()) << constraint.status();
  std::vector<int32_t> output;
  for (char c : std::string("abc")) {
    auto ids = FixtureTokenizer().Encode(std::string(1, c));
    ASSERT_TRUE(ids.ok() && ids->size() == 1u);
    output.push_back(ids->front());
    auto mask = (*constraint)->AllowedTokens(output, kFixtureEos);
    ASSERT_TRUE(mask.ok()) << mask.status();
    EXPECT_FALSE(TokenAllowed(**mask, kFixtureEos));  // "a", "ab", "abc" are no palindromes
  }
}

// A deep state's key is its whole stacks: past kMaxGrammarKeyBytes its mask is computed each
// time, not cached, so a grammar's cache stays small.
TEST(GrammarConstraintTest, DeepStatesAreComputedNotCached) {
  auto constraint = GrammarConstraint::Create(R"g(root ::= "(" root ")" | "x")g",
                                              FixtureVocabulary());
  ASSERT_TRUE(constraint.ok()) << constraint.status();
  auto open = FixtureTokenizer().Encode("(");
  ASSERT_TRUE(open.ok() && open->size() == 1u);
  const std::vector<int32_t> shallow(10, open->front()), deep(600, open->front());
  ASSERT_TRUE((*constraint)->AllowedTokens(shallow, kFixtureEos).ok());
  EXPECT_EQ((*constraint)->masks_computed(), 1);
  for (int i = 0; i < 2; ++i) {
    auto mask = (*constraint)->AllowedTokens(deep, kFixtureEos);
    ASSERT_TRUE(mask.ok()) << mask.status();
    EXPECT_TRUE(TokenAllowed(**mask, open->front()));
  }
  EXPECT_EQ((*constraint)->masks_computed(), 1);  // the deep state's two walks were not cached
}

TEST(GrammarConstraintTest, AnOutputOutsideTheGrammarIsFailedPrecondition) {
  auto constraint = GrammarConstraint::Create("root ::= [0-9]+", FixtureVocabulary());
  ASSERT_TRUE(constraint.ok());
  auto ids = FixtureTokenizer().Encode("12a");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*constraint)->AllowedTokens(*ids, kFixtureEos).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Rules r0 .. r10, each of two ways to reach the next, then r11: 2^11 parse stacks where r0
// begins.
std::string TwoWayChain() {
  std::string gbnf;
  for (int i = 0; i < 11; ++i) {
    gbnf += "r" + std::to_string(i) + " ::= (\"\" | \" \"?) r" + std::to_string(i + 1) + " | r" +
            std::to_string(i + 1) + " \"x\"\n";
  }
  return gbnf + "r11 ::= \"y\"\n";
}

TEST(GrammarConstraintTest, AGrammarTooAmbiguousAtItsStartIsRefused) {
  // Eleven rules, each of two ways: 2^11 stacks before the first character.
  const std::string gbnf = "root ::= r0\n" + TwoWayChain();
  auto constraint = GrammarConstraint::Create(gbnf, FixtureVocabulary());
  ASSERT_FALSE(constraint.ok());
  EXPECT_EQ(constraint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(constraint.status().message().find("too ambiguous"), absl::string_view::npos)
      << constraint.status();
}

TEST(GrammarConstraintTest, AStateWhoseEveryNextCharacterPassesTheBoundsIsInvalidArgument) {
  // The start is one stack; the "a" it reads leads to 2^11 (eleven two-way rules).
  const std::string gbnf = "root ::= \"a\" r0\n" + TwoWayChain();
  auto constraint = GrammarConstraint::Create(gbnf, FixtureVocabulary());
  ASSERT_TRUE(constraint.ok()) << constraint.status();
  // The start reads "a" only, and the step that reads it passes the bound.
  auto after = (*constraint)->AllowedTokens({}, kFixtureEos);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(after.status().message().find("less ambiguous"), absl::string_view::npos)
      << after.status();
}

}  // namespace
}  // namespace blossom
