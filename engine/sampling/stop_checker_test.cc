// StopChecker's token rules: the model's end tokens, stop tokens, length, their precedence,
// min_new_tokens and the suppressed tokens. Stop strings and streaming are in
// stop_checker_streaming_test.cc.
#include "engine/sampling/stop_checker.h"

#include <string>
#include <vector>

#include "engine/sampling/stop_checker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace stop_checker_test {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// ---------------------------------------------------------------------------------------------
// Token rules, length, and precedence.

struct TokenCase {
  std::string name;
  StoppingParams params;
  std::vector<Step> steps;
  std::string text;  // total emitted
  FinishReason reason;
  size_t steps_consumed;
};

std::vector<TokenCase> TokenCases() {
  StoppingParams plain = Stops({"STOP", "xyz"}, 5);
  plain.stop_token_ids = {kStopId};
  StoppingParams ignore = plain;
  ignore.ignore_eos = true;
  StoppingParams include = plain;
  include.include_stop_string_in_output = true;
  StoppingParams eos_listed = plain;
  eos_listed.stop_token_ids = {kEos, kStopId};
  StoppingParams min3 = plain;
  min3.min_new_tokens = 3;
  return {
      {"eos", plain, {{kText, "a"}, {kEos, "</s>"}, {kText, "b"}}, "a", FinishReason::kEosToken, 2},
      {"eos_releases_held_text",
       plain,
       {{kText, "a x"}, {kEos, "</s>"}},
       "a x",
       FinishReason::kEosToken,
       2},
      {"ignore_eos",
       ignore,
       {{kText, "a"}, {kEos, "</s>"}, {kText, "b"}},
       "a</s>b",
       FinishReason::kNone,
       3},
      {"eos_text_included_on_request", include, {{kEos, "</s>"}}, "</s>", FinishReason::kEosToken,
       1},
      {"eos_text_left_out", plain, {{kText, "a"}, {kEos, "</s>"}}, "a", FinishReason::kEosToken, 2},
      {"stop_token", plain, {{kText, "a"}, {kStopId, "<st>"}}, "a", FinishReason::kStopToken, 2},
      {"stop_token_included",
       include,
       {{kText, "a"}, {kStopId, "<st>"}},
       "a<st>",
       FinishReason::kStopToken,
       2},
      {"stop_token_releases_held_text",
       plain,
       {{kText, "ab ST"}, {kStopId, ""}},
       "ab ST",
       FinishReason::kStopToken,
       2},
      {"stop_token_with_ignore_eos", ignore, {{kStopId, "<st>"}}, "", FinishReason::kStopToken, 1},
      {"length", plain, TextSteps({"a", "b", "c", "d", "e", "f"}), "abcde", FinishReason::kLength,
       5},
      {"length_flushes_held_text", plain, TextSteps({"a", "b", "c", "d", "e xy"}), "abcde xy",
       FinishReason::kLength, 5},
      // Precedence on one token: EOS > stop token > stop string > length.
      {"eos_over_stop_token", eos_listed, {{kEos, "</s>"}}, "", FinishReason::kEosToken, 1},
      {"stop_token_over_stop_string",
       plain,
       {{kText, "a"}, {kStopId, "STOP"}},
       "a",
       FinishReason::kStopToken,
       2},
      {"stop_string_over_length", plain, TextSteps({"a", "b", "c", "d", "eSTOPf"}), "abcde",
       FinishReason::kStopString, 5},
      {"eos_over_length",
       plain,
       {{kText, "a"}, {kText, "b"}, {kText, "c"}, {kText, "d"}, {kEos, "</s>"}},
       "abcd",
       FinishReason::kEosToken,
       5},
      {"stop_token_over_length",
       plain,
       {{kText, "a"}, {kText, "b"}, {kText, "c"}, {kText, "d"}, {kStopId, "!"}},
       "abcd",
       FinishReason::kStopToken,
       5},
      // min_new_tokens: below it, EOS/stop tokens are ordinary text; up to it (included) stop
      // strings do not end the request (vLLM V1); a stop string may start there and end after.
      {"min_eos_ignored",
       min3,
       {{kEos, "</s>"}, {kText, "a"}, {kEos, "</s>"}},
       "</s>a",
       FinishReason::kEosToken,
       3},
      {"min_stop_token_ignored",
       min3,
       {{kStopId, "<st>"}, {kText, "a"}, {kStopId, "<st>"}},
       "<st>a",
       FinishReason::kStopToken,
       3},
      {"min_stop_string_ignored",
       min3,
       {{kText, "STOP"}, {kText, "xyz"}, {kText, "a"}, {kText, "STOP"}},
       "STOPxyza",
       FinishReason::kStopString,
       4},
      {"min_stop_string_ending_at_min_is_text",
       min3,
       {{kText, "a"}, {kText, "ST"}, {kText, "OP"}, {kText, "b"}},
       "aSTOPb",
       FinishReason::kNone,
       4},
      {"min_stop_string_starting_at_min_ending_after",
       min3,
       {{kText, "a"}, {kText, "b"}, {kText, "ST"}, {kText, "OPc"}},
       "ab",
       FinishReason::kStopString,
       4},
      {"min_eos_at_min_ends",
       min3,
       {{kText, "a"}, {kText, "b"}, {kEos, "</s>"}},
       "ab",
       FinishReason::kEosToken,
       3},
  };
}

TEST(StopCheckerTest, TokenRulesLengthAndPrecedence) {
  for (const TokenCase& c : TokenCases()) {
    SCOPED_TRACE(c.name);
    StopChecker checker(c.params, {kEos});
    const Stream s = Feed(checker, c.steps);
    EXPECT_EQ(s.text + checker.Flush(), c.text);
    EXPECT_EQ(s.reason, c.reason) << FinishReasonName(s.reason);
    EXPECT_EQ(s.steps, c.steps_consumed);
    EXPECT_EQ(checker.finished(), c.reason != FinishReason::kNone);
    EXPECT_EQ(checker.reason(), c.reason);
  }
}

// A model with several end tokens (config.json's list, generation_config.json's end of turn):
// every one is an EOS, not a client's stop token.
constexpr int32_t kEndOfTurn = 9;
constexpr int32_t kEndOfText = 7;
const std::vector<int32_t> kModelEnds = {kEos, kEndOfTurn, kEndOfText};

TEST(StopCheckerTest, EveryModelEndTokenIsAnEos) {
  for (int32_t end : kModelEnds) {
    SCOPED_TRACE(end);
    StopChecker checker(Stops({}), kModelEnds);
    EXPECT_TRUE(checker.EndsOn(end));
    const Stream s = Feed(checker, {{kText, "a"}, {end, "<end>"}, {kText, "b"}});
    EXPECT_EQ(s.text, "a");  // the end token's text left out
    EXPECT_EQ(s.reason, FinishReason::kEosToken) << FinishReasonName(s.reason);
    EXPECT_EQ(s.steps, 2u);
  }
  // Also when the client lists one of them as a stop token: EOS comes first (rule 1).
  StoppingParams listed = Stops({});
  listed.stop_token_ids = {kEndOfTurn};
  StopChecker checker(listed, kModelEnds);
  EXPECT_EQ(Feed(checker, {{kEndOfTurn, ""}}).reason, FinishReason::kEosToken);
}

TEST(StopCheckerTest, IgnoreEosIgnoresEveryModelEndToken) {
  StoppingParams p = Stops({});
  p.ignore_eos = true;
  StopChecker checker(p, kModelEnds);
  EXPECT_FALSE(checker.EndsOn(kEndOfTurn));
  EXPECT_FALSE(checker.EndsOn(kEndOfText));
  EXPECT_THAT(checker.SuppressedTokens(0), IsEmpty());
  const Stream s = Feed(checker, {{kEndOfTurn, "<eot>"}, {kEos, "</s>"}, {kEndOfText, "<eo>"}});
  EXPECT_FALSE(s.finished);
  EXPECT_EQ(s.text, "<eot></s><eo>");
  // A client's stop token still ends it, as its own.
  p.stop_token_ids = {kEndOfTurn};
  StopChecker stop_listed(p, kModelEnds);
  EXPECT_EQ(Feed(stop_listed, {{kEndOfTurn, ""}}).reason, FinishReason::kStopToken);
}

TEST(StopCheckerTest, EveryModelEndTokenIsSuppressedOnceBelowMinNewTokens) {
  StoppingParams p = Stops({});
  p.min_new_tokens = 2;
  p.stop_token_ids = {kEndOfTurn, 11};
  StopChecker checker(p, kModelEnds);
  for (int32_t generated : {0, 1}) {
    EXPECT_THAT(checker.SuppressedTokens(generated),
                UnorderedElementsAre(kEos, kEndOfTurn, kEndOfText, 11))
        << generated;
  }
  EXPECT_THAT(checker.SuppressedTokens(2), IsEmpty());
  EXPECT_FALSE(checker.EndsOn(kEndOfText));  // token 1 < min_new_tokens
  Feed(checker, {{kText, "a"}});
  EXPECT_TRUE(checker.EndsOn(kEndOfText));
  EXPECT_EQ(Feed(checker, {{kEndOfText, "<eo>"}}).reason, FinishReason::kEosToken);
}

TEST(StopCheckerTest, NoEndTokensMeansNoEosRule) {
  StopChecker checker(Stops({}), {});
  const Stream s = Feed(checker, {{kEos, "</s>"}});
  EXPECT_FALSE(s.finished);
  EXPECT_EQ(s.text, "</s>");
  EXPECT_THAT(checker.SuppressedTokens(0), IsEmpty());
}

TEST(StopCheckerTest, SuppressedTokensBelowMinNewTokens) {
  StoppingParams p = Stops({"x"});
  p.min_new_tokens = 3;
  p.stop_token_ids = {kStopId, kEos, kStopId};
  StopChecker checker(p, {kEos});
  for (int32_t generated : {0, 1, 2}) {
    EXPECT_THAT(checker.SuppressedTokens(generated), ElementsAre(kEos, kStopId)) << generated;
  }
  EXPECT_THAT(checker.SuppressedTokens(3), IsEmpty());
  EXPECT_THAT(checker.SuppressedTokens(10), IsEmpty());

  p.ignore_eos = true;
  p.stop_token_ids = {kStopId};
  StopChecker ignoring(p, {kEos});
  EXPECT_THAT(ignoring.SuppressedTokens(0), ElementsAre(kStopId));

  p.min_new_tokens = 0;
  StopChecker no_min(p, {kEos});
  EXPECT_THAT(no_min.SuppressedTokens(0), IsEmpty());
}

TEST(StopCheckerTest, FinishReasonNamesAreStable) {
  EXPECT_STREQ(FinishReasonName(FinishReason::kNone), "none");
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kEosToken), "eos_token");
  EXPECT_STREQ(FinishReasonName(FinishReason::kStopToken), "stop_token");
  EXPECT_STREQ(FinishReasonName(FinishReason::kStopString), "stop_string");
  EXPECT_STREQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
  EXPECT_STREQ(FinishReasonName(FinishReason::kError), "error");
  EXPECT_STREQ(FinishReasonName(FinishReason::kAborted), "abort");
}

}  // namespace
}  // namespace stop_checker_test
}  // namespace blossom
