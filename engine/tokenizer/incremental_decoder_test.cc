#include "engine/tokenizer/incremental_decoder.h"

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/test_util.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/text/utf8.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

using Json = nlohmann::json;

constexpr char kFixtureTokenizer[] = "tests/fixtures/tokenizer/tokenizer.json";
constexpr char kFixtureGolden[] = "tests/fixtures/tokenizer_golden.json";
constexpr char kTinyGolden[] = "engine/tokenizer/testdata/tiny_golden.json";

std::string Quote(const std::string& text) {
  return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json LoadJson(const std::string& relative) {
  auto text = ReadFileToString(RunfilePath(relative));
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return Json();
  return Json::parse(*text, nullptr, /*allow_exceptions=*/false);
}

// Streams `ids` and checks the invariant: every Push output is whole UTF-8 characters, text()
// is the running concatenation, and the final text equals the batch Decode.
void ExpectStreamingMatchesBatch(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                 bool skip_special) {
  IncrementalDecoder decoder(&tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = decoder.Push(id);
    ASSERT_EQ(FindInvalidUtf8(piece), absl::string_view::npos) << "partial character emitted";
    streamed += piece;
    ASSERT_EQ(decoder.text(), streamed);
  }
  streamed += decoder.Flush();
  ASSERT_EQ(decoder.text(), streamed);
  std::string ids_text;
  for (int32_t id : ids) ids_text += std::to_string(id) + " ";
  ASSERT_EQ(Quote(streamed), Quote(tok.Decode(ids, skip_special)))
      << "ids " << ids_text << " skip_special " << skip_special;
}

// Model ids of the single-byte tokens, to build sequences that split characters.
std::vector<int32_t> ByteTokenIds(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    std::string ch;
    AppendUtf8(printable ? static_cast<uint32_t>(b) : next++, &ch);
    auto id = tok.TokenToId(ch);
    ids.push_back(id.value_or(-1));
  }
  return ids;
}

class IncrementalFixtureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tok = Tokenizer::FromFile(RunfilePath(kFixtureTokenizer));
    if (tok.ok()) tokenizer_ = tok->release();
    golden_ = new Json(LoadJson(kFixtureGolden));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete golden_;
  }
  void SetUp() override {
    ASSERT_NE(tokenizer_, nullptr) << "cannot load " << kFixtureTokenizer;
    ASSERT_TRUE(golden_->is_object());
    ASSERT_GT((*golden_)["cases"].size(), 0u);
    ASSERT_GT((*golden_)["decode_cases"].size(), 0u);
  }
  static Tokenizer* tokenizer_;
  static Json* golden_;
};
Tokenizer* IncrementalFixtureTest::tokenizer_ = nullptr;
Json* IncrementalFixtureTest::golden_ = nullptr;

TEST_F(IncrementalFixtureTest, GoldenCases) {
  for (const Json& c : (*golden_)["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    ExpectStreamingMatchesBatch(*tokenizer_, ids, false);
    ExpectStreamingMatchesBatch(*tokenizer_, ids, true);
    IncrementalDecoder decoder(tokenizer_, false);
    for (int32_t id : ids) decoder.Push(id);
    decoder.Flush();
    EXPECT_EQ(decoder.text(), c["decoded"].get<std::string>());
  }
}

TEST_F(IncrementalFixtureTest, GoldenDecodeCases) {
  for (const Json& c : (*golden_)["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    ExpectStreamingMatchesBatch(*tokenizer_, ids, false);
    ExpectStreamingMatchesBatch(*tokenizer_, ids, true);
    IncrementalDecoder decoder(tokenizer_, false);
    for (int32_t id : ids) decoder.Push(id);
    decoder.Flush();
    EXPECT_EQ(Quote(decoder.text()), Quote(c["text"].get<std::string>()));
  }
}

TEST_F(IncrementalFixtureTest, RandomSequences) {
  const std::vector<int32_t> byte_ids = ByteTokenIds(*tokenizer_);
  const std::vector<int32_t> specials = tokenizer_->SpecialIds();
  const int32_t n = tokenizer_->vocab_size();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> ids;
    const int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) {
      switch (rng() % 4) {
        case 0:  // a byte token: often half of a multi-byte character
          ids.push_back(byte_ids[rng() % 256]);
          break;
        case 1:  // a lead byte followed by continuation bytes, possibly cut short
          ids.push_back(byte_ids[0xC2 + rng() % 0x33]);
          for (uint32_t k = rng() % 4; k > 0; --k) ids.push_back(byte_ids[0x80 + rng() % 0x40]);
          break;
        case 2:
          ids.push_back(specials[rng() % specials.size()]);
          break;
        default:  // any id, including ones past the vocabulary and negative ones
          ids.push_back(static_cast<int32_t>(rng() % (n + 20)) - 5);
      }
    }
    ExpectStreamingMatchesBatch(*tokenizer_, ids, false);
    ExpectStreamingMatchesBatch(*tokenizer_, ids, true);
  }
}

TEST_F(IncrementalFixtureTest, HoldsPartialCharactersUntilComplete) {
  const std::vector<int32_t> b = ByteTokenIds(*tokenizer_);
  IncrementalDecoder decoder(tokenizer_, false);
  EXPECT_EQ(decoder.Push(b['A']), "A");
  EXPECT_EQ(decoder.Push(b[0xF0]), "");
  EXPECT_EQ(decoder.Push(b[0x9F]), "");
  EXPECT_EQ(decoder.Push(b[0x98]), "");
  EXPECT_EQ(decoder.Push(b[0x80]), "\xF0\x9F\x98\x80");
  // A lead byte that the next byte cannot continue is replaced as soon as that is known.
  EXPECT_EQ(decoder.Push(b[0xE4]), "");
  EXPECT_EQ(decoder.Push(b['B']),
            "\xEF\xBF\xBD"
            "B");
  // A truncated character at the end becomes one U+FFFD on Flush.
  EXPECT_EQ(decoder.Push(b[0xE4]), "");
  EXPECT_EQ(decoder.Push(b[0xB8]), "");
  EXPECT_EQ(decoder.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(decoder.text(),
            "A\xF0\x9F\x98\x80\xEF\xBF\xBD"
            "B\xEF\xBF\xBD");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST_F(IncrementalFixtureTest, SkippedSpecialTokenDoesNotBreakACharacter) {
  const std::vector<int32_t> b = ByteTokenIds(*tokenizer_);
  const int32_t eos = *tokenizer_->TokenToId("</s>");
  IncrementalDecoder skipping(tokenizer_, /*skip_special_tokens=*/true);
  std::string out;
  for (int32_t id : {b[0xF0], b[0x9F], eos, b[0x98], b[0x80]}) out += skipping.Push(id);
  out += skipping.Flush();
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
  IncrementalDecoder keeping(tokenizer_, /*skip_special_tokens=*/false);
  out.clear();
  for (int32_t id : {b[0xF0], b[0x9F], eos, b[0x98], b[0x80]}) out += keeping.Push(id);
  out += keeping.Flush();
  EXPECT_EQ(out, "\xEF\xBF\xBD</s>\xEF\xBF\xBD\xEF\xBF\xBD");
}

// The tiny configurations include added tokens that decode through or around the byte map.
TEST(IncrementalTinyTest, AllConfigs) {
  const Json golden = LoadJson(kTinyGolden);
  ASSERT_GE(golden["configs"].size(), 8u);
  for (const Json& config : golden["configs"]) {
    auto tok = Tokenizer::FromJson(config["tokenizer"].dump(), config["name"].get<std::string>());
    ASSERT_TRUE(tok.ok()) << tok.status();
    for (const char* key : {"cases", "decode_cases"}) {
      for (const Json& c : config[key]) {
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        ExpectStreamingMatchesBatch(**tok, ids, false);
        ExpectStreamingMatchesBatch(**tok, ids, true);
      }
    }
  }
}

}  // namespace
}  // namespace blossom
