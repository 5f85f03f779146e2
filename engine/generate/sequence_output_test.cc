#include "engine/generate/sequence_output.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

// The fixture tokenizer's byte tokens: "€" is E2 82 AC, one token per byte.
constexpr int32_t kByteE2 = 162;
constexpr int32_t kByte82 = 228;
constexpr int32_t kSpaceA = 263;  // " a"
constexpr int32_t kEos = 2;
const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

class SequenceOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = Tokenizer::FromFile(FixturePath("tokenizer/tokenizer.json"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }

  std::unique_ptr<SequenceOutput> MakeOutput(StoppingParams stopping,
                                             std::vector<int32_t> end_token_ids = {kEos}) {
    return std::make_unique<SequenceOutput>(tokenizer_, std::vector<int32_t>{5}, SamplingParams(),
                                            stopping, end_token_ids);
  }

  // Accepts `tokens` in order; returns the last event.
  static TokenEvent AcceptAll(SequenceOutput& out, const std::vector<int32_t>& tokens) {
    TokenEvent last;
    for (int32_t token : tokens) {
      SampleResult sample;
      sample.token = token;
      absl::StatusOr<TokenEvent> event = out.Accept(sample);
      EXPECT_TRUE(event.ok()) << event.status();
      if (event.ok()) last = *event;
    }
    return last;
  }

  static Tokenizer* tokenizer_;
};
Tokenizer* SequenceOutputTest::tokenizer_ = nullptr;

TEST_F(SequenceOutputTest, FixtureHasTheByteTokens) {
  EXPECT_EQ(*tokenizer_->Encode("\xE2\x82\xAC a"),
            (std::vector<int32_t>{kByteE2, kByte82, 109, kSpaceA}));
}

TEST_F(SequenceOutputTest, PartialCharacterIsHeldWhileItMayComplete) {
  StoppingParams stopping;
  stopping.max_new_tokens = 10;
  auto out = MakeOutput(stopping);
  EXPECT_EQ(AcceptAll(*out, {kByteE2, kByte82}).text_delta, "");
  EXPECT_EQ(AcceptAll(*out, {109}).text_delta, "\xE2\x82\xAC");
}

// The text of a finished sequence is the batch decode of its tokens, a trailing partial
// character included (as U+FFFD), whatever ended it.
TEST_F(SequenceOutputTest, PartialCharacterAtTheEndIsShownAsDecodeShowsIt) {
  const std::string decoded = tokenizer_->Decode({kByteE2, kByte82}, /*skip_special_tokens=*/true);
  ASSERT_EQ(decoded, kReplacement);
  {
    SCOPED_TRACE("length");
    StoppingParams stopping;
    stopping.max_new_tokens = 2;
    auto out = MakeOutput(stopping);
    const TokenEvent last = AcceptAll(*out, {kByteE2, kByte82});
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
    EXPECT_EQ(last.text_delta, decoded);
    EXPECT_EQ(out->text(), decoded);
  }
  {
    SCOPED_TRACE("eos");
    StoppingParams stopping;
    stopping.max_new_tokens = 10;
    auto out = MakeOutput(stopping);
    const TokenEvent last = AcceptAll(*out, {kByteE2, kByte82, kEos});
    EXPECT_EQ(last.finish_reason, FinishReason::kEosToken);
    EXPECT_EQ(last.text_delta, decoded);
    EXPECT_EQ(out->text(), decoded);
  }
  {
    SCOPED_TRACE("eos kept as text");
    StoppingParams stopping;
    stopping.max_new_tokens = 10;
    stopping.skip_special_tokens = false;
    auto out = MakeOutput(stopping);
    const TokenEvent last = AcceptAll(*out, {kByteE2, kByte82, kEos});
    EXPECT_EQ(last.finish_reason, FinishReason::kEosToken);
    EXPECT_EQ(out->text(), decoded) << "EOS's own text is left out, not the character before";
  }
  for (bool include : {false, true}) {
    SCOPED_TRACE(include ? "stop token included" : "stop token");
    StoppingParams stopping;
    stopping.max_new_tokens = 10;
    stopping.stop_token_ids = {kSpaceA};
    stopping.include_stop_string_in_output = include;
    auto out = MakeOutput(stopping);
    const TokenEvent last = AcceptAll(*out, {kByteE2, kByte82, kSpaceA});
    EXPECT_EQ(last.finish_reason, FinishReason::kStopToken);
    EXPECT_EQ(out->text(), include ? decoded + " a" : decoded);
  }
  for (bool include : {false, true}) {
    // The stop token itself is a partial character: shown (U+FFFD, as a decode of every token
    // shows it) when its text is included, nothing of it otherwise.
    SCOPED_TRACE(include ? "partial stop token included" : "partial stop token");
    StoppingParams stopping;
    stopping.max_new_tokens = 10;
    stopping.stop_token_ids = {kByteE2};
    stopping.include_stop_string_in_output = include;
    auto out = MakeOutput(stopping);
    const TokenEvent last = AcceptAll(*out, {kSpaceA, kByteE2});
    EXPECT_EQ(last.finish_reason, FinishReason::kStopToken);
    EXPECT_EQ(out->text(), include ? tokenizer_->Decode({kSpaceA, kByteE2}, true) : " a");
  }
  for (FinishReason reason : {FinishReason::kCancelled, FinishReason::kError}) {
    SCOPED_TRACE(FinishReasonName(reason));
    StoppingParams stopping;
    stopping.max_new_tokens = 10;
    auto out = MakeOutput(stopping);
    EXPECT_EQ(AcceptAll(*out, {kByteE2, kByte82}).text_delta, "");
    EXPECT_EQ(out->Abort(reason), decoded);
    EXPECT_EQ(out->text(), decoded);
    EXPECT_EQ(out->finish_reason(), reason);
    EXPECT_EQ(out->Abort(reason), "");  // once only
  }
}

TEST_F(SequenceOutputTest, AbortReleasesHeldBackTextBeforeThePartialCharacter) {
  StoppingParams stopping;
  stopping.max_new_tokens = 10;
  stopping.stop_strings = {" ab"};  // " a" may start it: held back
  auto out = MakeOutput(stopping);
  EXPECT_EQ(AcceptAll(*out, {kSpaceA}).text_delta, "");
  EXPECT_EQ(AcceptAll(*out, {kByteE2, kByte82}).text_delta, "");
  EXPECT_EQ(out->Abort(FinishReason::kCancelled), std::string(" a") + kReplacement);
}

// A model's second end token (a chat fine-tune's end of turn) ends the output as EOS does: its
// text left out, the partial character before it shown, suppressed below min_new_tokens. Guided
// output may end only with the first.
TEST_F(SequenceOutputTest, EveryModelEndTokenEndsTheOutputAsEos) {
  StoppingParams stopping;
  stopping.max_new_tokens = 10;
  stopping.min_new_tokens = 1;
  auto out = MakeOutput(stopping, {kEos, kSpaceA});
  absl::StatusOr<SampleRow> row = out->PrepareSample(0);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(std::vector<int32_t>(row->context.suppressed_tokens.begin(),
                                 row->context.suppressed_tokens.end()),
            (std::vector<int32_t>{kEos, kSpaceA}));
  EXPECT_EQ(row->context.end_token, kEos);
  const TokenEvent last = AcceptAll(*out, {kByteE2, kByte82, kSpaceA});
  EXPECT_EQ(last.finish_reason, FinishReason::kEosToken);
  EXPECT_EQ(out->text(), tokenizer_->Decode({kByteE2, kByte82}, /*skip_special_tokens=*/true));

  stopping.ignore_eos = true;
  out = MakeOutput(stopping, {kEos, kSpaceA});
  row = out->PrepareSample(0);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_TRUE(row->context.suppressed_tokens.empty());
  EXPECT_EQ(row->context.end_token, -1);
  EXPECT_FALSE(AcceptAll(*out, {kSpaceA}).finished);
  EXPECT_EQ(out->text(), " a");
}

TEST_F(SequenceOutputTest, NothingAfterAStopStringIsShown) {
  StoppingParams stopping;
  stopping.max_new_tokens = 10;
  stopping.stop_strings = {" a"};
  auto out = MakeOutput(stopping);
  const TokenEvent last = AcceptAll(*out, {kSpaceA});
  EXPECT_EQ(last.finish_reason, FinishReason::kStopString);
  EXPECT_EQ(out->text(), "");
}

}  // namespace
}  // namespace blossom
