#include "benchmarks/synthetic_prompts.h"

#include <set>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Tokenizes like byte-level BPE pre-tokenization: each word with its leading space is a token
// (ids count distinct words), or one token per byte with `bytes`.
class FakeTokenizer : public LoadClient {
 public:
  // max_tokens > 0: texts of more tokens are refused with OUT_OF_RANGE, as a server refuses
  // texts over its max_input_tokens.
  explicit FakeTokenizer(bool bytes = false, size_t max_tokens = 0)
      : bytes_(bytes), max_tokens_(max_tokens) {}
  void Start(const LoadRequest&, BenchClock::time_point, Done) override {}
  bool SupportsTokenIds() const override { return true; }
  absl::StatusOr<Tokenized> Tokenize(const std::string& text) override {
    ++calls;
    Tokenized out;
    for (size_t i = 0; i < text.size();) {
      size_t j = i + 1;
      if (!bytes_) {
        while (j < text.size() && text[j] != ' ') ++j;
      }
      out.ids.push_back(static_cast<int32_t>(j - i));
      out.spans.emplace_back(static_cast<int32_t>(i), static_cast<int32_t>(j));
      i = j;
    }
    if (max_tokens_ > 0 && out.ids.size() > max_tokens_) {
      return absl::OutOfRangeError("text is too long");
    }
    return out;
  }
  int calls = 0;

 private:
  bool bytes_;
  size_t max_tokens_;
};

TEST(SyntheticPromptsTest, NormalizeJoinsWordsWithSingleSpaces) {
  EXPECT_EQ(NormalizeCorpus("  a\tb\n\nc  "), "a b c");
}

TEST(SyntheticPromptsTest, TextPromptsHaveExactLengthsAndDifferentStarts) {
  FakeTokenizer tokenizer;
  const std::string corpus = "one two three four five six seven eight nine ten";
  const std::vector<int32_t> lengths = {3, 3, 3, 3, 25, 1};
  auto set = BuildPrompts(tokenizer, corpus, lengths, /*token_ids=*/false, 5);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->requests.size(), lengths.size());
  EXPECT_EQ(set->exact, 6);
  EXPECT_GT(set->corpus_tokens, 25);  // repeated to fit the longest prompt
  std::set<std::string> distinct;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const LoadRequest& r = set->requests[i];
    EXPECT_TRUE(r.token_ids.empty());
    EXPECT_EQ(r.prompt_tokens, lengths[i]);
    EXPECT_EQ(static_cast<int32_t>(tokenizer.Tokenize(r.text)->ids.size()), lengths[i]) << r.text;
    distinct.insert(r.text);
  }
  EXPECT_GE(distinct.size(), 3u);
  EXPECT_EQ(set->tokenize_calls, 2 + 6);
}

TEST(SyntheticPromptsTest, TokenIdPromptsAreSlicesOfTheCorpus) {
  FakeTokenizer tokenizer;
  auto set = BuildPrompts(tokenizer, "a bb ccc dddd", {2, 4}, /*token_ids=*/true, 1);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->requests[0].token_ids.size(), 2u);
  EXPECT_EQ(set->requests[1].token_ids.size(), 4u);
  EXPECT_EQ(set->exact, 2);
  EXPECT_EQ(set->tokenize_calls, 2);  // no checks needed
}

TEST(SyntheticPromptsTest, ALongCorpusIsTokenizedInPiecesTheServerAccepts) {
  // 3000 words, ~17 kB: over the 1000-byte pieces, and a server that takes at most 40 tokens
  // (about 200 bytes) makes the pieces halve until they fit.
  std::string corpus;
  for (int i = 0; i < 3000; ++i) corpus += (i > 0 ? " w" : "w") + std::to_string(i % 97);
  FakeTokenizer whole, limited(/*bytes=*/false, /*max_tokens=*/40);
  const Tokenized want = *whole.Tokenize(corpus);
  auto set = BuildPrompts(limited, corpus, {128, 7}, /*token_ids=*/true, 4);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->corpus_tokens, static_cast<int64_t>(want.ids.size()))
      << "cut before spaces, the pieces tokenize as the whole corpus";
  EXPECT_GT(set->tokenize_calls, 17000 / 200);
  // Text prompts cut from the pieces' shifted spans have exact lengths.
  auto text = BuildPrompts(limited, corpus, {30, 12}, /*token_ids=*/false, 4);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->exact, 2);
  EXPECT_EQ(static_cast<int>(whole.Tokenize(text->requests[0].text)->ids.size()), 30);
  // A server that refuses even 64 bytes: the error is the server's.
  FakeTokenizer tiny(/*bytes=*/true, /*max_tokens=*/8);
  EXPECT_EQ(BuildPrompts(tiny, corpus, {5}, true, 1).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(SyntheticPromptsTest, NeverSplitsAUtf8Character) {
  FakeTokenizer tokenizer(/*bytes=*/true);
  const std::string corpus = "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xc3\xa0 la plage";
  std::vector<int32_t> lengths(40);
  for (int i = 0; i < 40; ++i) lengths[i] = 1 + i % 7;
  auto set = BuildPrompts(tokenizer, corpus, lengths, false, 9);
  ASSERT_TRUE(set.ok()) << set.status();
  for (size_t i = 0; i < lengths.size(); ++i) {
    const std::string& t = set->requests[i].text;
    ASSERT_FALSE(t.empty());
    EXPECT_NE(static_cast<unsigned char>(t[0]) & 0xC0, 0x80) << i;
    // A complete character ends the text: the byte after the last lead byte's sequence.
    size_t k = t.size() - 1;
    while (k > 0 && (static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) --k;
    const unsigned char lead = static_cast<unsigned char>(t[k]);
    const size_t need = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    EXPECT_EQ(t.size() - k, need) << i;
    EXPECT_LE(std::abs(set->requests[i].prompt_tokens - lengths[i]), 3) << i;
  }
}

TEST(SyntheticPromptsTest, FindsCutsInLongMultiByteStretches) {
  // Byte tokens over 4-byte characters: most ends are mid-character; a cut must still be found.
  FakeTokenizer tokenizer(/*bytes=*/true);
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "\xf0\x9f\x98\x80";
  std::vector<int32_t> lengths(30);
  for (int i = 0; i < 30; ++i) lengths[i] = 1 + i;
  auto set = BuildPrompts(tokenizer, corpus, lengths, false, 3);
  ASSERT_TRUE(set.ok()) << set.status();
  for (size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(set->requests[i].text.size() % 4, 0u) << i;
    EXPECT_FALSE(set->requests[i].text.empty());
  }
}

TEST(SyntheticPromptsTest, TextPromptsNeedOffsets) {
  class NoSpans : public FakeTokenizer {
   public:
    absl::StatusOr<Tokenized> Tokenize(const std::string& text) override {
      auto t = FakeTokenizer::Tokenize(text);
      t->spans.clear();
      return t;
    }
  } tokenizer;
  EXPECT_EQ(BuildPrompts(tokenizer, "a b c", {2}, false, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(BuildPrompts(tokenizer, "a b c", {2}, true, 1).ok());
}

}  // namespace
}  // namespace blossom
