#include "engine/tokenizer/tokenizer.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/tokenizer/test_util.h"
#include "engine/text/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kFixtureTokenizer[] = "tests/fixtures/tokenizer/tokenizer.json";
constexpr char kFixtureLegacy[] = "tests/fixtures/tokenizer/tokenizer_legacy_merges.json";
constexpr char kFixtureGolden[] = "tests/fixtures/tokenizer_golden.json";
constexpr char kTinyGolden[] = "engine/tokenizer/testdata/tiny_golden.json";

// Printable form of a text for failure messages (JSON string escaping).
std::string Quote(const std::string& text) {
  return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Ids(const std::vector<int32_t>& ids) { return "[" + absl::StrJoin(ids, ", ") + "]"; }

Json LoadJson(const std::string& relative) {
  auto text = ReadFileToString(RunfilePath(relative));
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return Json();
  return Json::parse(*text, nullptr, /*allow_exceptions=*/false);
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& relative) {
  auto tok = Tokenizer::FromFile(RunfilePath(relative));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// ---------------------------------------------------------------------------------------------
// The committed fixture: a BLOOM-style tokenizer trained with Hugging Face, and what Hugging Face
// encodes and decodes with it.

class FixtureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = LoadTokenizer(kFixtureTokenizer).release();
    legacy_ = LoadTokenizer(kFixtureLegacy).release();
    golden_ = new Json(LoadJson(kFixtureGolden));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete legacy_;
    delete golden_;
  }
  void SetUp() override {
    ASSERT_NE(tokenizer_, nullptr);
    ASSERT_NE(legacy_, nullptr);
    ASSERT_TRUE(golden_->is_object()) << "cannot parse " << kFixtureGolden;
    // A golden test that compares nothing must fail, not pass.
    ASSERT_GT((*golden_)["cases"].size(), 0u);
    ASSERT_GT((*golden_)["decode_cases"].size(), 0u);
  }
  static const Json& cases() { return (*golden_)["cases"]; }

  static Tokenizer* tokenizer_;
  static Tokenizer* legacy_;
  static Json* golden_;
};
Tokenizer* FixtureTest::tokenizer_ = nullptr;
Tokenizer* FixtureTest::legacy_ = nullptr;
Json* FixtureTest::golden_ = nullptr;

TEST_F(FixtureTest, EncodeMatchesHuggingFace) {
  int checked = 0;
  for (const Json& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    auto ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << Quote(text) << ": " << ids.status();
    EXPECT_EQ(*ids, expected) << "text " << Quote(text) << "\n  expected " << Ids(expected)
                              << "\n  actual   " << Ids(*ids);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases().size()));
}

TEST_F(FixtureTest, TokensMatchHuggingFace) {
  for (const Json& c : cases()) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto tokens = c["tokens"].get<std::vector<std::string>>();
    ASSERT_EQ(ids.size(), tokens.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(tokenizer_->IdToToken(ids[i]).value_or("<none>"), tokens[i]) << "id " << ids[i];
      EXPECT_EQ(tokenizer_->TokenToId(tokens[i]).value_or(-1), ids[i]) << Quote(tokens[i]);
    }
  }
}

TEST_F(FixtureTest, DecodeMatchesHuggingFace) {
  for (const Json& c : cases()) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->Decode(ids), c["decoded"].get<std::string>()) << Ids(ids);
    EXPECT_EQ(tokenizer_->Decode(ids, /*skip_special_tokens=*/true),
              c["decoded_skip_special"].get<std::string>())
        << Ids(ids);
  }
}

TEST_F(FixtureTest, DecodeCasesMatchHuggingFace) {
  for (const Json& c : (*golden_)["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(Quote(tokenizer_->Decode(ids)), Quote(c["text"].get<std::string>())) << Ids(ids);
    if (c.contains("text_skip_special")) {
      EXPECT_EQ(Quote(tokenizer_->Decode(ids, true)),
                Quote(c["text_skip_special"].get<std::string>()))
          << Ids(ids);
    }
  }
}

TEST_F(FixtureTest, LegacyMergesFormatGivesSameIds) {
  EXPECT_EQ(legacy_->vocab_size(), tokenizer_->vocab_size());
  for (const Json& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    auto ids = legacy_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << Quote(text);
  }
}

TEST_F(FixtureTest, VocabularyAndSpecialTokens) {
  if (golden_->contains("vocab_size_with_added")) {
    EXPECT_EQ(tokenizer_->vocab_size(), (*golden_)["vocab_size_with_added"].get<int32_t>());
  }
  // BLOOM's special tokens, as the fixture generator trains them.
  EXPECT_EQ(tokenizer_->TokenToId("<unk>"), absl::optional<int32_t>(0));
  EXPECT_EQ(tokenizer_->TokenToId("<s>"), absl::optional<int32_t>(1));
  EXPECT_EQ(tokenizer_->TokenToId("</s>"), absl::optional<int32_t>(2));
  EXPECT_EQ(tokenizer_->TokenToId("<pad>"), absl::optional<int32_t>(3));
  const std::vector<int32_t> specials = tokenizer_->SpecialIds();
  for (int32_t id : {0, 1, 2, 3}) {
    EXPECT_TRUE(tokenizer_->IsSpecial(id)) << id;
    EXPECT_NE(std::find(specials.begin(), specials.end(), id), specials.end()) << id;
  }
  EXPECT_FALSE(tokenizer_->IsSpecial(-1));
  EXPECT_FALSE(tokenizer_->IsSpecial(tokenizer_->vocab_size()));
  EXPECT_FALSE(tokenizer_->TokenToId("no such token, surely").has_value());
  EXPECT_FALSE(tokenizer_->IdToToken(-1).has_value());
  EXPECT_FALSE(tokenizer_->IdToToken(tokenizer_->vocab_size()).has_value());
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    auto token = tokenizer_->IdToToken(id);
    if (token.has_value()) {
      EXPECT_EQ(tokenizer_->TokenToId(*token), absl::optional<int32_t>(id));
    }
  }
}

// Byte-level BPE is lossless: decode(encode(s)) == s for any valid text without special tokens.
TEST_F(FixtureTest, RoundTripGoldenTexts) {
  for (const Json& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    auto ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(Quote(tokenizer_->Decode(*ids)), Quote(text));
  }
}

TEST_F(FixtureTest, RoundTripRandomTexts) {
  const std::vector<std::string> pool = {"a",
                                         "Z",
                                         "7",
                                         " ",
                                         "  ",
                                         "\t",
                                         "\n",
                                         "\r\n",
                                         ".",
                                         ",",
                                         "!",
                                         "?",
                                         "(",
                                         ")",
                                         "|",
                                         "[",
                                         "'",
                                         "\xC3\xA9",
                                         "\xE4\xB8\xAD",
                                         "\xE3\x80\x82",
                                         "\xEF\xBC\x8C",
                                         "\xE2\x80\xA6",
                                         "\xE0\xA5\xA4",
                                         "\xD8\x8C",
                                         "\xF0\x9F\x98\x80",
                                         "\xE2\x80\x8D",
                                         "\xC2\xA0",
                                         "\xE3\x80\x80",
                                         "\xE2\x80\xA8",
                                         "\xC2\x85",
                                         std::string("\0", 1),
                                         "\x7F",
                                         "\xC4\xA0",
                                         "\xEF\xBB\xBF",
                                         "\xF4\x8F\xBF\xBF",
                                         "the",
                                         " of",
                                         "ing",
                                         "Hello",
                                         " world"};
  std::mt19937 rng(42);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 25);
    for (int i = 0; i < n; ++i) text += pool[rng() % pool.size()];
    auto ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(Quote(tokenizer_->Decode(*ids)), Quote(text)) << Ids(*ids);
  }
}

// Prompts can be long and have no whitespace at all (e.g. Chinese): one huge BPE word.
TEST_F(FixtureTest, LongWordRoundTrips) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += (i % 7 == 0) ? "\xE5\xA4\xA9" : "\xE4\xB8\xAD";
  auto ids = tokenizer_->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), text.size());
  EXPECT_EQ(tokenizer_->Decode(*ids), text);
}

// The tokenizer is immutable, so concurrent encodes must agree with serial ones.
TEST_F(FixtureTest, ConcurrentEncodeIsDeterministic) {
  std::vector<std::vector<int32_t>> serial;
  for (const Json& c : cases()) serial.push_back(*tokenizer_->Encode(c["text"].get<std::string>()));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        for (size_t i = 0; i < cases().size(); ++i) {
          auto ids = tokenizer_->Encode(cases()[i]["text"].get<std::string>());
          if (!ids.ok() || *ids != serial[i]) ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST_F(FixtureTest, InvalidUtf8IsRejectedWithOffset) {
  const std::vector<std::pair<std::string, size_t>> bad = {{"\xFF", 0},
                                                           {"abc\x80", 3},
                                                           {"ok\xC3", 2},
                                                           {"\xC0\x80", 0},
                                                           {"x\xED\xA0\x80", 1},
                                                           {"\xF4\x90\x80\x80", 0},
                                                           {"\xE2\x82\xAC\xE2\x82", 3}};
  for (const auto& [text, offset] : bad) {
    auto ids = tokenizer_->Encode(text);
    ASSERT_FALSE(ids.ok()) << "offset " << offset;
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ids.status().message()),
                HasSubstr("byte offset " + std::to_string(offset)));
  }
  auto empty = tokenizer_->Encode("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// ---------------------------------------------------------------------------------------------
// Tiny tokenizers exercising features the fixture does not use (legacy merges, unk handling,
// ignore_merges, lstrip/rstrip/normalized added tokens), with Hugging Face's output
// (testdata/make_testdata.py).

TEST(TinyGoldenTest, AllConfigsMatchHuggingFace) {
  const Json golden = LoadJson(kTinyGolden);
  ASSERT_TRUE(golden.is_object());
  ASSERT_GE(golden["configs"].size(), 8u);
  for (const Json& config : golden["configs"]) {
    const std::string name = config["name"].get<std::string>();
    SCOPED_TRACE(name);
    auto tok = Tokenizer::FromJson(config["tokenizer"].dump(), name);
    ASSERT_TRUE(tok.ok()) << tok.status();
    // vocab_size() is max id + 1; Hugging Face's get_vocab_size() counts entries, which is
    // smaller only when the vocabulary has holes (the unk configs drop three byte tokens).
    int32_t max_id = -1;
    for (const auto& kv : config["tokenizer"]["model"]["vocab"].items()) {
      max_id = std::max(max_id, kv.value().get<int32_t>());
    }
    for (const Json& t : config["tokenizer"]["added_tokens"])
      max_id = std::max(max_id, t["id"].get<int32_t>());
    EXPECT_EQ((*tok)->vocab_size(), max_id + 1);
    const bool has_holes = config["name"].get<std::string>().find("unk") != std::string::npos;
    EXPECT_EQ((*tok)->vocab_size() - (has_holes ? 3 : 0), config["vocab_size"].get<int32_t>());
    ASSERT_GT(config["cases"].size(), 100u);
    for (const Json& c : config["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const auto expected = c["ids"].get<std::vector<int32_t>>();
      auto ids = (*tok)->Encode(text);
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_EQ(*ids, expected) << "text " << Quote(text) << "\n  expected " << Ids(expected)
                                << "\n  actual   " << Ids(*ids);
    }
    for (const Json& c : config["decode_cases"]) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(Quote((*tok)->Decode(ids)), Quote(c["text"].get<std::string>())) << Ids(ids);
      EXPECT_EQ(Quote((*tok)->Decode(ids, true)), Quote(c["text_skip_special"].get<std::string>()))
          << Ids(ids);
    }
  }
}

Json TinyBase() {
  const Json golden = LoadJson(kTinyGolden);
  for (const Json& config : golden["configs"]) {
    if (config["name"] == "base") return config["tokenizer"];
  }
  ADD_FAILURE() << "no base config in " << kTinyGolden;
  return Json::object();
}

TEST(TinyTokenizerTest, AddedTokensBehaveLikeHuggingFace) {
  const Json golden = LoadJson(kTinyGolden);
  for (const Json& config : golden["configs"]) {
    if (config["name"] != "added_tokens") continue;
    auto tok = Tokenizer::FromJson(config["tokenizer"].dump(), "added_tokens");
    ASSERT_TRUE(tok.ok()) << tok.status();
    const Tokenizer& t = **tok;
    const int32_t lr = *t.TokenToId("<LR>");
    const int32_t bar = *t.TokenToId("<|a b|>");
    EXPECT_TRUE(t.IsSpecial(lr));
    EXPECT_FALSE(t.IsSpecial(*t.TokenToId("<L>")));
    // "hi" is an added token that is also a model token: it keeps the model id.
    EXPECT_EQ(t.TokenToId("hi"),
              absl::optional<int32_t>(config["tokenizer"]["model"]["vocab"]["hi"].get<int32_t>()));
    // lstrip and rstrip swallow the surrounding Unicode whitespace into the token.
    EXPECT_EQ(*t.Encode("a \t<LR>\xE3\x80\x80 b"),
              (std::vector<int32_t>{*t.TokenToId("a"), lr, *t.TokenToId("b")}));
    // Added tokens are decoded through the ByteLevel decoder unless a char is outside its map.
    EXPECT_EQ(t.Decode({bar}), "<|a b|>");
    EXPECT_EQ(t.Decode({*t.TokenToId("\xC3\xA9!")}), "\xEF\xBF\xBD!");
    EXPECT_EQ(t.Decode({lr, bar}, /*skip_special_tokens=*/true), "");
    const std::vector<int32_t> specials = t.SpecialIds();
    EXPECT_EQ(specials, (std::vector<int32_t>{0, 1, 2, 3, lr, bar}));
  }
}

// Tie-breaking and rank order, checked by hand against Hugging Face's merge_all.
TEST(TinyTokenizerTest, BpeMergesLowestRankFirstLeftmostOnTies) {
  auto tok = Tokenizer::FromJson(TinyBase().dump(), "tiny");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  auto id = [&](const char* token) { return *t.TokenToId(token); };
  // a a a: "a a" merges leftmost first.
  EXPECT_EQ(*t.Encode("aaa"), (std::vector<int32_t>{id("aa"), id("a")}));
  EXPECT_EQ(*t.Encode("aaaaa"), (std::vector<int32_t>{id("aaaa"), id("a")}));
  // "a b" (rank 0) beats "b c" (rank 1); then "ab c" (rank 3).
  EXPECT_EQ(*t.Encode("abc"), (std::vector<int32_t>{id("abc")}));
  // Split regex: the space joins the following word; lone spaces stay single.
  EXPECT_EQ(*t.Encode("a  a"), (std::vector<int32_t>{id("a"), id("\xC4\xA0"),
                                                     id("\xC4\xA0"
                                                        "a")}));
  EXPECT_EQ(t.vocab_size(), static_cast<int32_t>(TinyBase()["model"]["vocab"].size()));
}

// A fine-tune's tokenizer.json often keeps the trainer's last truncation/padding call; encoding
// a text ignores them, as transformers does for tokenizer(text).
TEST(TinyTokenizerTest, SavedTruncationAndPaddingAreIgnored) {
  Json j = TinyBase();
  auto plain = Tokenizer::FromJson(j.dump(), "tiny");
  ASSERT_TRUE(plain.ok()) << plain.status();
  j["truncation"] = Json::parse(
      R"({"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0})");
  j["padding"] = Json::parse(R"({"strategy": {"Fixed": 8}, "direction": "Right", "pad_id": 0,
      "pad_type_id": 0, "pad_token": "a", "pad_to_multiple_of": null})");
  auto saved = Tokenizer::FromJson(j.dump(), "tiny");
  ASSERT_TRUE(saved.ok()) << saved.status();
  auto a = (*plain)->Encode("ab ab");
  auto b = (*saved)->Encode("ab ab");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(a->size(), 1u);
  EXPECT_EQ(*a, *b);
}

// A model directory's tokenizer as transformers' AutoTokenizer would load it: tokenizer_config's
// add_prefix_space (applied at load by BloomTokenizerFast) is refused, not silently dropped, and
// ids past the model's embedding rows are refused at start, not at the first request using one.
TEST(TinyTokenizerTest, FromModelDirChecksTheConfigAndTheModelsRows) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/model-dir";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::ofstream(dir + "/tokenizer.json") << TinyBase().dump();
  auto plain = Tokenizer::FromModelDir(dir);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const int32_t vocab = (*plain)->vocab_size();
  std::ofstream(dir + "/tokenizer_config.json") << R"({"add_prefix_space": false})";
  EXPECT_TRUE(Tokenizer::FromModelDir(dir, vocab).ok());
  auto too_many = Tokenizer::FromModelDir(dir, vocab - 1);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(too_many.status().message()), HasSubstr("embedding rows"));
  std::ofstream(dir + "/tokenizer_config.json") << R"({"add_prefix_space": true})";
  auto prefixed = Tokenizer::FromModelDir(dir, vocab);
  EXPECT_EQ(prefixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(prefixed.status().message()),
              HasSubstr("tokenizer_config.json: add_prefix_space = true"));
  std::ofstream(dir + "/tokenizer_config.json") << "[";
  EXPECT_EQ(Tokenizer::FromModelDir(dir).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TinyTokenizerTest, DropoutZeroIsAccepted) {
  Json j = TinyBase();
  j["model"]["dropout"] = 0.0;
  EXPECT_TRUE(Tokenizer::FromJson(j.dump(), "tiny").ok());
}

// ---------------------------------------------------------------------------------------------
// Refusals: every unsupported feature is named, with its JSON path and value.

struct Refusal {
  const char* what;
  std::function<void(Json&)> mutate;
  std::vector<std::string> message_parts;
};

TEST(TokenizerLoadTest, UnsupportedFeaturesAreRefusedByName) {
  const std::vector<Refusal> refusals = {
      {"normalizer",
       [](Json& j) { j["normalizer"] = Json::parse(R"({"type": "NFC"})"); },
       {"normalizer.type = \"NFC\""}},
      {"truncation not an object",
       [](Json& j) { j["truncation"] = 8; },
       {"truncation = 8", "expected an object or null"}},
      {"version", [](Json& j) { j["version"] = "2.0"; }, {"version = \"2.0\""}},
      {"other pre-tokenizer",
       [](Json& j) { j["pre_tokenizer"] = Json::parse(R"({"type": "Whitespace"})"); },
       {"pre_tokenizer.type = \"Whitespace\""}},
      {"no pre-tokenizer", [](Json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer = null"}},
      {"other regex",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; },
       {"pre_tokenizer.pretokenizers[0].pattern.Regex = ", "\\\\w+"}},
      {"string pattern",
       [](Json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = Json::parse(R"({"String": " "})");
       },
       {"pre_tokenizer.pretokenizers[0].pattern = ", "String"}},
      {"split behavior",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       {"pre_tokenizer.pretokenizers[0].behavior = \"Removed\""}},
      {"split invert",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       {"pre_tokenizer.pretokenizers[0].invert = true"}},
      {"use_regex",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; },
       {"pre_tokenizer.pretokenizers[1].use_regex = true"}},
      {"use_regex default",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][1].erase("use_regex"); },
       {"pre_tokenizer.pretokenizers[1].use_regex is missing"}},
      {"add_prefix_space",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       {"pre_tokenizer.pretokenizers[1].add_prefix_space = true"}},
      {"sequence order",
       [](Json& j) {
         auto& list = j["pre_tokenizer"]["pretokenizers"];
         std::swap(list[0], list[1]);
       },
       {"pre_tokenizer.pretokenizers[1].type = \"Split\""}},
      {"wordpiece",
       [](Json& j) { j["model"]["type"] = "WordPiece"; },
       {"model.type = \"WordPiece\""}},
      {"unigram",
       [](Json& j) { j["model"] = Json::parse(R"({"type": "Unigram", "vocab": []})"); },
       {"model.type = \"Unigram\""}},
      {"dropout", [](Json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout = 0.1"}},
      {"byte_fallback",
       [](Json& j) { j["model"]["byte_fallback"] = true; },
       {"model.byte_fallback = true"}},
      {"subword prefix",
       [](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       {"model.continuing_subword_prefix = \"##\""}},
      {"word suffix",
       [](Json& j) { j["model"]["end_of_word_suffix"] = "</w>"; },
       {"model.end_of_word_suffix = \"</w>\""}},
      {"unk not in vocab",
       [](Json& j) { j["model"]["unk_token"] = "[UNK]"; },
       {"model.unk_token = \"[UNK]\"", "not in model.vocab"}},
      {"merge out of vocab",
       [](Json& j) {
         j["model"]["merges"].push_back(Json::array({"q", "qq"}));
       },
       {"model.merges[", "\"qq\" is not in model.vocab"}},
      {"merge result out of vocab",
       [](Json& j) {
         j["model"]["merges"].push_back(Json::array({"q", "q"}));
       },
       {"model.merges[", "\"qq\" is not in model.vocab"}},
      {"bad legacy merge",
       [](Json& j) { j["model"]["merges"] = Json::array({"a b c"}); },
       {"model.merges[0] = \"a b c\""}},
      {"mixed merges",
       [](Json& j) { j["model"]["merges"].push_back("a b"); },
       {"model.merges[", "\"a b\"", "pair of strings"}},
      {"vocab id", [](Json& j) { j["model"]["vocab"]["a"] = -5; }, {"model.vocab[\"a\"] = -5"}},
      {"vocab id type",
       [](Json& j) { j["model"]["vocab"]["a"] = "1"; },
       {"model.vocab[\"a\"] = \"1\""}},
      {"no vocab", [](Json& j) { j["model"].erase("vocab"); }, {"model.vocab is missing"}},
      {"no decoder", [](Json& j) { j.erase("decoder"); }, {"decoder is missing"}},
      {"other decoder",
       [](Json& j) { j["decoder"] = Json::parse(R"({"type": "WordPiece"})"); },
       {"decoder.type = \"WordPiece\""}},
      {"template adds tokens",
       [](Json& j) {
         j["post_processor"] = Json::parse(R"({"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "special_tokens": {}})");
       },
       {"post_processor.single = ", "SpecialToken"}},
      {"roberta",
       [](Json& j) { j["post_processor"] = Json::parse(R"({"type": "RobertaProcessing"})"); },
       {"post_processor.type = \"RobertaProcessing\""}},
      {"single_word",
       [](Json& j) { j["added_tokens"][1]["single_word"] = true; },
       {"added_tokens[1].single_word = true"}},
      {"added token missing flag",
       [](Json& j) { j["added_tokens"][2].erase("lstrip"); },
       {"added_tokens[2].lstrip is missing"}},
      {"added token id renumbered",
       [](Json& j) { j["added_tokens"][3]["id"] = 77; },
       {"added_tokens[3].id = 77", "would give \"<pad>\" id 3"}},
      {"added token duplicate",
       [](Json& j) { j["added_tokens"].push_back(j["added_tokens"][0]); },
       {"added_tokens[4].content = \"<unk>\"", "duplicate"}},
      {"new added token id",
       [](Json& j) {
         j["added_tokens"].push_back(
             Json::parse(R"({"id": 5, "content": "<new>", "single_word": false,
             "lstrip": false, "rstrip": false, "normalized": false, "special": false})"));
       },
       {"added_tokens[4].id = 5", "id " + std::to_string(TinyBase()["model"]["vocab"].size())}},
      {"root", [](Json& j) { j = Json::array(); }, {"(root) = []"}},
  };
  for (const Refusal& r : refusals) {
    Json j = TinyBase();
    r.mutate(j);
    auto tok = Tokenizer::FromJson(j.dump(), "variant.json");
    ASSERT_FALSE(tok.ok()) << r.what << " was accepted";
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << r.what;
    const std::string message(tok.status().message());
    EXPECT_THAT(message, HasSubstr("variant.json: ")) << r.what;
    for (const std::string& part : r.message_parts) {
      EXPECT_THAT(message, HasSubstr(part)) << r.what;
    }
  }
}

TEST(TokenizerLoadTest, MalformedJsonIsInvalidArgument) {
  for (const char* text : {"", "{", "{\"model\": [1, 2", "nul", "{\"a\": 1,}"}) {
    auto tok = Tokenizer::FromJson(text, "broken.json");
    ASSERT_FALSE(tok.ok()) << text;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr("broken.json: malformed JSON"));
  }
}

TEST(TokenizerLoadTest, MissingFileIsNotFound) {
  auto tok = Tokenizer::FromFile("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("/nonexistent/dir/tokenizer.json"));
}

}  // namespace
}  // namespace blossom
