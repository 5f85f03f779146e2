// pre_tokenizer.h on its own. Whole-tokenizer agreement with Hugging Face (which is what makes
// these rules right) is tokenizer_test's; here, the pieces' own contracts, so that a failure
// points at the piece.
#include "engine/tokenizer/pre_tokenizer.h"

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/text/utf8.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

std::vector<std::string> Words(absl::string_view text) {
  std::vector<std::string> words;
  SplitBloomWords(text, [&](absl::string_view word) { words.emplace_back(word); });
  return words;
}

TEST(ByteLevelTest, IsABijectionThatKeepsPrintableBytes) {
  const ByteLevelTables& tables = ByteLevel();
  std::set<uint32_t> seen;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = tables.byte_to_cp[b];
    EXPECT_TRUE(seen.insert(cp).second) << "byte " << b;
    ASSERT_LT(cp, 512u);
    EXPECT_EQ(tables.cp_to_byte[cp], b);
    if (cp != static_cast<uint32_t>(b)) {
      EXPECT_EQ(cp, next++) << "byte " << b;
    }
  }
  EXPECT_EQ(next, 256u + 68u);  // the 68 non-printable bytes, in increasing order
  EXPECT_EQ(tables.byte_to_cp[' '], 0x120u);   // 'Ġ'
  EXPECT_EQ(tables.byte_to_cp['\n'], 0x10Au);  // 'Ċ'
  EXPECT_EQ(tables.byte_to_cp['a'], static_cast<uint32_t>('a'));
  int unmapped = 0;
  for (int cp = 0; cp < 512; ++cp) unmapped += tables.cp_to_byte[cp] < 0;
  EXPECT_EQ(unmapped, 512 - 256);
}

TEST(ByteLevelTest, DecodeTokenInvertsTheMapOrKeepsTheToken) {
  std::string all_bytes, all_chars;
  for (int b = 0; b < 256; ++b) {
    all_bytes.push_back(static_cast<char>(b));
    AppendUtf8(ByteLevel().byte_to_cp[b], &all_chars);
  }
  EXPECT_EQ(ByteLevelDecodeToken(all_chars), all_bytes);
  EXPECT_EQ(ByteLevelDecodeToken("\xC4\xA0hello"), " hello");  // "Ġhello"
  EXPECT_EQ(ByteLevelDecodeToken("\xC4\x8A\xC4\x8A"), "\n\n");  // "ĊĊ"
  EXPECT_EQ(ByteLevelDecodeToken(""), "");
  // A raw space, or any char outside the map, keeps the whole token as it is (added tokens).
  EXPECT_EQ(ByteLevelDecodeToken("a b"), "a b");
  EXPECT_EQ(ByteLevelDecodeToken("\xC4\xA0x\xE4\xBD\xA0"), "\xC4\xA0x\xE4\xBD\xA0");  // "Ġx你"
}

TEST(IsWhiteSpaceTest, IsExactlyUnicodeWhiteSpace) {
  const std::set<uint32_t> white = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                    0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                    0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                    0x2029, 0x202F, 0x205F, 0x3000};
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    ASSERT_EQ(IsWhiteSpace(cp), white.count(cp) == 1) << std::hex << "U+" << cp;
  }
}

TEST(SplitBloomWordsTest, MatchesAndGapsInOrder) {
  struct Case {
    std::string text;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"", {}},
      {"Hello, world!", {"Hello", ",", " world", "!"}},
      {" x", {" x"}},
      {"a  b", {"a", " ", " b"}},  // only the space right before a word joins it
      {"  ", {"  "}},
      {"\tx", {"\t", "x"}},  // other white space never joins a word
      {"x\xC2\xA0y", {"x", "\xC2\xA0", "y"}},  // U+00A0 is white space
      {"(x)|y", {"(", "x", ")|", "y"}},        // ( ) | are delimiters ...
      {"[x]", {"[x]"}},                        // ... and [ ] are not
      {"\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82\xE4\xB8\x96",  // "你好。世"
       {"\xE4\xBD\xA0\xE5\xA5\xBD", "\xE3\x80\x82", "\xE4\xB8\x96"}},
      {"a...b ?c", {"a", "...", "b", " ?", "c"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Words(c.text), c.words) << "text: \"" << c.text << "\"";
  }
}

TEST(SplitBloomWordsTest, WordsAreNonEmptyAndConcatenateBackToTheText) {
  const std::vector<std::string> alphabet = {"a", "b", " ", " ", "\n", ".", ",", "!", "(", "|",
                                             "\xC2\xA0", "\xE3\x80\x82", "\xE4\xBD\xA0"};
  std::mt19937 gen(11);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    for (int k = trial % 17; k > 0; --k) text += alphabet[pick(gen)];
    const std::vector<std::string> words = Words(text);
    for (const std::string& w : words) EXPECT_FALSE(w.empty()) << text;
    ASSERT_EQ(absl::StrJoin(words, ""), text);
  }
}

}  // namespace
}  // namespace blossom
