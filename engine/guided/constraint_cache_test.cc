#include "engine/guided/constraint_cache.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/guided/fixture_vocabulary.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(ConstraintCacheTest, ReturnsTheCompiledConstraintOfARecentText) {
  int built = 0;
  ConstraintCache cache(
      [&] {
        ++built;
        return FixtureVocabulary();
      },
      /*capacity=*/3);
  auto a = cache.JsonSchema(R"({"type": "object"})");
  auto b = cache.JsonSchema(R"({"type": "array"})");
  auto a_again = cache.JsonSchema(R"({"type": "object"})");
  ASSERT_TRUE(a.ok() && b.ok() && a_again.ok());
  EXPECT_EQ(a->get(), a_again->get());
  EXPECT_EQ(built, 1);
  // The same text as a regex, or as a compact schema, is another constraint.
  auto regex = cache.Regex(R"({"type": "object"})");
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_NE(regex->get(), a->get());
  auto compact = cache.JsonSchema(R"({"type": "object"})", JsonGrammarOptions{false});
  ASSERT_TRUE(compact.ok());
  EXPECT_NE(compact->get(), a->get());
  // Capacity 3: the array's was the least recent and is compiled again.
  auto b_again = cache.JsonSchema(R"({"type": "array"})");
  ASSERT_TRUE(b_again.ok());
  EXPECT_NE(b->get(), b_again->get());
  EXPECT_EQ(cache.JsonSchema(R"({"type": "integer", "minimum": 0})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Regex("a(?=b)").status().code(), absl::StatusCode::kInvalidArgument);
  // A grammar is cached by its text, apart from the regex of the same text.
  auto grammar = cache.Grammar("root ::= [a-z]+");
  auto grammar_again = cache.Grammar("root ::= [a-z]+");
  ASSERT_TRUE(grammar.ok() && grammar_again.ok()) << grammar.status();
  EXPECT_EQ(grammar->get(), grammar_again->get());
  EXPECT_EQ(cache.Grammar("root ::= root \"a\"").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Requests on several threads share the cache and the compiled constraints (and their mask
// caches): every answer equals the one a single thread gets. Run under --config=tsan too.
TEST(ConstraintCacheTest, ConcurrentRequestsGetTheSameMasks) {
  ConstraintCache cache([] { return FixtureVocabulary(); }, /*capacity=*/2);
  // Three schemas and a GBNF grammar (its matcher's arena is per call, its masks shared).
  const char* texts[] = {R"({"type": "object"})", R"({"type": "array", "items": {"type": "integer"}})",
                         R"({"type": "string", "format": "date"})",
                         R"g(root ::= "{" (""" [a-z]* """)? "}" | "[" [0-9] ("," [ ]? [0-9])* "]")g"};
  constexpr int kConstraints = 4;
  auto get = [&](int s) {
    return s == 3 ? cache.Grammar(texts[s]) : cache.JsonSchema(texts[s]);
  };
  const std::vector<std::vector<int32_t>> outputs = {
      {}, *FixtureTokenizer().Encode("{\"a\""), *FixtureTokenizer().Encode("[1, 2"),
      *FixtureTokenizer().Encode("\"2026-")};
  // The answers of one thread, by constraint and output (an error where the output leaves it).
  std::vector<std::vector<std::string>> want(kConstraints);
  for (int s = 0; s < kConstraints; ++s) {
    auto c = get(s);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& output : outputs) {
      auto mask = (*c)->AllowedTokens(output, kFixtureEos);
      want[s].push_back(mask.ok() ? std::string(reinterpret_cast<const char*>((*mask)->data()),
                                                (*mask)->size() * 8)
                                  : "error");
    }
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const int s = (t + i) % kConstraints;
        auto c = get(s);
        if (!c.ok()) {
          ++mismatches;
          continue;
        }
        const size_t o = static_cast<size_t>(i) % outputs.size();
        auto mask = (*c)->AllowedTokens(outputs[o], kFixtureEos);
        const std::string got =
            mask.ok() ? std::string(reinterpret_cast<const char*>((*mask)->data()),
                                    (*mask)->size() * 8)
                      : "error";
        if (got != want[s][o]) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace blossom
