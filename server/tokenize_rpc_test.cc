// TokenizeText and DetokenizeIds on the fixture tokenizer: ids, token texts and byte offsets,
// the round trip, special tokens, and refusals naming the field and reason.
#include "server/tokenize_rpc.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/status_details.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

class TokenizeRpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = Tokenizer::FromFile(FixturePath("tokenizer/tokenizer.json"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  static int32_t Vocab() { return static_cast<int32_t>(tokenizer_->vocab_size()); }
  static Tokenizer* tokenizer_;
};
Tokenizer* TokenizeRpcTest::tokenizer_ = nullptr;

TEST_F(TokenizeRpcTest, TokenizeGivesIdsTextsOffsetsAndTheLimit) {
  v1::TokenizeRequest request;
  request.set_text("The server reads é");
  v1::TokenizeResponse response;
  ASSERT_TRUE(TokenizeText(*tokenizer_, request, 64, 128, &response).ok());
  EXPECT_EQ(std::vector<int32_t>(response.ids().begin(), response.ids().end()),
            *tokenizer_->Encode(request.text()));
  ASSERT_EQ(response.offsets_size(), response.ids_size());
  EXPECT_EQ(response.offsets(0).start(), 0);
  EXPECT_EQ(response.offsets(response.offsets_size() - 1).end(),
            static_cast<int32_t>(request.text().size()))
      << "byte offsets: the last ends at the text's byte length";
  EXPECT_EQ(response.max_total_tokens(), 128);
}

TEST_F(TokenizeRpcTest, TokenizeRefusals) {
  v1::TokenizeRequest request;
  request.set_text("\xff");
  v1::TokenizeResponse response;
  absl::Status status = TokenizeText(*tokenizer_, request, 64, 128, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DetailsOf(status).field, "text");
  request.set_text("The server reads the cache again and again");
  status = TokenizeText(*tokenizer_, request, 3, 128, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(DetailsOf(status).reason, error_reason::kPromptTooLong);
}

TEST_F(TokenizeRpcTest, DetokenizeIsTheTokenizersDecode) {
  const std::string text = "The server reads é";
  v1::DetokenizeRequest request;
  const std::vector<int32_t> ids = *tokenizer_->Encode(text);
  for (int32_t id : ids) request.add_ids(id);
  v1::DetokenizeResponse response;
  const absl::Status status = DetokenizeIds(*tokenizer_, request, Vocab(), 128, &response);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(response.text(), text);
  // Special tokens stay unless skipped (vLLM's /detokenize keeps them).
  const absl::optional<int32_t> eos = tokenizer_->TokenToId("</s>");
  ASSERT_TRUE(eos.has_value());
  request.add_ids(*eos);
  ASSERT_TRUE(DetokenizeIds(*tokenizer_, request, Vocab(), 128, &response).ok());
  EXPECT_EQ(response.text(), text + "</s>");
  request.set_skip_special_tokens(true);
  ASSERT_TRUE(DetokenizeIds(*tokenizer_, request, Vocab(), 128, &response).ok());
  EXPECT_EQ(response.text(), text);
  v1::DetokenizeRequest empty;
  ASSERT_TRUE(DetokenizeIds(*tokenizer_, empty, Vocab(), 128, &response).ok());
  EXPECT_EQ(response.text(), "");
}

TEST_F(TokenizeRpcTest, DetokenizeRefusals) {
  v1::DetokenizeRequest request;
  request.add_ids(5);
  request.add_ids(Vocab());
  v1::DetokenizeResponse response;
  absl::Status status = DetokenizeIds(*tokenizer_, request, Vocab(), 128, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DetailsOf(status).field, "ids");
  EXPECT_EQ(DetailsOf(status).reason, error_reason::kInvalidPrompt);
  EXPECT_NE(status.message().find("ids[1]"), std::string::npos) << status;
  request.set_ids(1, -3);
  EXPECT_EQ(DetokenizeIds(*tokenizer_, request, Vocab(), 128, &response).code(),
            absl::StatusCode::kInvalidArgument);
  v1::DetokenizeRequest many;
  for (int i = 0; i < 129; ++i) many.add_ids(5);
  status = DetokenizeIds(*tokenizer_, many, Vocab(), 128, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(DetailsOf(status).field, "ids");
}

}  // namespace
}  // namespace blossom
