#include "engine/speculative/ngram_proposer.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

NgramProposerConfig Config(int32_t k, int32_t max_n = 3, int32_t min_n = 1) {
  NgramProposerConfig c;
  c.num_speculative_tokens = k;
  c.lookup_max = max_n;
  c.lookup_min = min_n;
  return c;
}

TEST(NgramProposerTest, DraftsWhatFollowedTheSuffixEarlier) {
  // "... 7 8 9 | 4 5 ... 7 8" -> after "7 8" came 9 4 5.
  const std::vector<int32_t> tokens = {1, 7, 8, 9, 4, 5, 6, 7, 8};
  EXPECT_THAT(ProposeNgramDraft(Config(3), tokens, 10), ElementsAre(9, 4, 5));
  EXPECT_THAT(ProposeNgramDraft(Config(2), tokens, 10), ElementsAre(9, 4));
  EXPECT_THAT(ProposeNgramDraft(Config(5), tokens, 1), ElementsAre(9));  // the caller's cap
}

TEST(NgramProposerTest, PrefersTheLongestSuffixThenTheNewestOccurrence) {
  // Suffix "2 3": occurs at 1 (followed by 40) and at 5 (followed by 50); "1 2 3" only at 0
  // (followed by 40). Longest first: 40.
  const std::vector<int32_t> tokens = {1, 2, 3, 40, 9, 2, 3, 50, 1, 2, 3};
  EXPECT_THAT(ProposeNgramDraft(Config(1, 3), tokens, 8), ElementsAre(40));
  // With only 2-grams allowed, the newest occurrence of "2 3" wins: 50.
  EXPECT_THAT(ProposeNgramDraft(Config(1, 2), tokens, 8), ElementsAre(50));
}

TEST(NgramProposerTest, FallsBackToShorterSuffixes) {
  // "8 5" never occurred before; "5" did, followed by 6.
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 5};
  EXPECT_THAT(ProposeNgramDraft(Config(2, 3, 1), tokens, 8), ElementsAre(6, 7));
  EXPECT_THAT(ProposeNgramDraft(Config(2, 3, 2), tokens, 8), IsEmpty());
}

TEST(NgramProposerTest, ALoopDraftsWholeTurnsOfItself) {
  // The newest occurrence of "4 4" overlaps the suffix (period 1): the draft repeats 4.
  EXPECT_THAT(ProposeNgramDraft(Config(5, 2), std::vector<int32_t>{4, 4, 4, 4}, 8),
              ElementsAre(4, 4, 4, 4, 4));
  // Period 3: "2 3 1" occurred 3 tokens earlier; after the 3 known tokens that followed it the
  // draft goes on around the loop.
  EXPECT_THAT(ProposeNgramDraft(Config(5, 3), std::vector<int32_t>{1, 2, 3, 1, 2, 3, 1}, 8),
              ElementsAre(2, 3, 1, 2, 3));
}

TEST(NgramProposerTest, NothingToDraft) {
  EXPECT_THAT(ProposeNgramDraft(Config(4), std::vector<int32_t>{1, 2, 3, 4}, 8), IsEmpty());
  EXPECT_THAT(ProposeNgramDraft(Config(4), std::vector<int32_t>{7}, 8), IsEmpty());
  EXPECT_THAT(ProposeNgramDraft(Config(4), std::vector<int32_t>{}, 8), IsEmpty());
  EXPECT_THAT(ProposeNgramDraft(Config(0), std::vector<int32_t>{1, 1, 1}, 8), IsEmpty());
  EXPECT_THAT(ProposeNgramDraft(Config(4), std::vector<int32_t>{1, 1, 1}, 0), IsEmpty());
}

TEST(DraftLengthTest, GrowsWhileDraftsAreAcceptedAndShrinksOnRejection) {
  DraftLength length(5);
  EXPECT_EQ(length.tokens(), 5);
  length.Observe(5, 2);
  EXPECT_EQ(length.tokens(), 4);
  for (int i = 0; i < 10; ++i) length.Observe(length.tokens(), 0);
  EXPECT_EQ(length.tokens(), 1);  // never below one
  length.Observe(1, 1);
  EXPECT_EQ(length.tokens(), 3);
  length.Observe(2, 2);  // a shorter draft (lookup found less), all accepted: grows
  EXPECT_EQ(length.tokens(), 5);
  length.Observe(5, 5);
  EXPECT_EQ(length.tokens(), 5);  // never above the maximum
  length.Observe(0, 0);           // no draft: no change
  EXPECT_EQ(length.tokens(), 5);
}

TEST(NgramProposerTest, ValidateNamesTheField) {
  EXPECT_TRUE(Validate(Config(0, 0, 0)).ok());  // off: the lookup sizes are not used
  EXPECT_TRUE(Validate(Config(4, 4, 1)).ok());
  EXPECT_NE(Validate(Config(-1)).message().find("num_speculative_tokens"), std::string::npos);
  EXPECT_NE(Validate(Config(4, 3, 0)).message().find("lookup_min"), std::string::npos);
  EXPECT_NE(Validate(Config(4, 1, 2)).message().find("lookup_max"), std::string::npos);
}

}  // namespace
}  // namespace blossom
