#include "engine/guided/constraint_cache.h"

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
}

}  // namespace
}  // namespace blossom
