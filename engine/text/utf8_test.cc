#include "engine/text/utf8.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

struct LossyCase {
  std::string bytes;
  std::string expected;  // Python: bytes.decode("utf-8", errors="replace")
};

// Expected values were produced by CPython 3.11; the same rule (one U+FFFD per maximal subpart)
// is what Rust's from_utf8_lossy, and so Hugging Face's decode, applies.
std::vector<LossyCase> LossyCases() {
  return {
      {std::string("", 0), ""},
      {std::string("\x61\x62\x63", 3), "\x61\x62\x63"},
      {std::string("\xC3\xA9", 2), "\xC3\xA9"},
      {std::string("\xC3", 1), "\xEF\xBF\xBD"},
      {std::string("\xC3\x41", 2), "\xEF\xBF\xBD\x41"},
      {std::string("\x80", 1), "\xEF\xBF\xBD"},
      {std::string("\x80\x80", 2), "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xBF", 1), "\xEF\xBF\xBD"},
      {std::string("\xC0\x80", 2), "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xC1\xBF", 2), "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xE0\x80\x80", 3), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xE0\xA0", 2), "\xEF\xBF\xBD"},
      {std::string("\xE0\xA0\x80", 3), "\xE0\xA0\x80"},
      {std::string("\xED\x9F\xBF", 3), "\xED\x9F\xBF"},
      {std::string("\xED\xA0\x80", 3), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xEF\xBF\xBD", 3), "\xEF\xBF\xBD"},
      {std::string("\xF0\x90\x80\x80", 4), "\xF0\x90\x80\x80"},
      {std::string("\xF0\x80\x80\x80", 4), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xF0\x9F\x98", 3), "\xEF\xBF\xBD"},
      {std::string("\xF0\x9F\x98\x41", 4), "\xEF\xBF\xBD\x41"},
      {std::string("\xF4\x8F\xBF\xBF", 4), "\xF4\x8F\xBF\xBF"},
      {std::string("\xF4\x90\x80\x80", 4), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xF5\x80", 2), "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xFF\xFE", 2), "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xE2\x82\xAC\xE2\x82", 5), "\xE2\x82\xAC\xEF\xBF\xBD"},
      {std::string("\x41\xF0\x9F\x42\x98", 5), "\x41\xEF\xBF\xBD\x42\xEF\xBF\xBD"},
      {std::string("\xF1\x80\x80\xE1\x80\xC2", 6), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {std::string("\xE1\x80\x80\x80", 4), "\xE1\x80\x80\xEF\xBF\xBD"},
      {std::string("\x00\x7F", 2), std::string("\x00\x7F", 2)},
  };
}

std::string Hex(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    static const char kDigits[] = "0123456789ABCDEF";
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
    out += ' ';
  }
  return out;
}

TEST(Utf8Lossy, MatchesPythonReplacement) {
  for (const LossyCase& c : LossyCases()) {
    EXPECT_EQ(Hex(Utf8Lossy(c.bytes)), Hex(c.expected)) << "input " << Hex(c.bytes);
  }
}

TEST(Utf8Lossy, NonFinalHoldsOnlyCompletablePrefix) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("A\xF0\x9F\x98", /*final=*/false, &out), 1u);
  EXPECT_EQ(out, "A");
  out.clear();
  // C3 can never be completed by a following 'A' once that 'A' is there.
  EXPECT_EQ(AppendUtf8Lossy("\xC3"
                            "A",
                            /*final=*/false, &out),
            2u);
  EXPECT_EQ(out,
            "\xEF\xBF\xBD"
            "A");
  out.clear();
  // E0 80 is already ill-formed (80 is not a valid second byte after E0).
  EXPECT_EQ(AppendUtf8Lossy("\xE0\x80", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Feeding random byte strings in random chunks, holding back the unconsumed tail, must give the
// same text as one final decode: the property the streaming detokenizer relies on.
TEST(Utf8Lossy, ChunkedDecodeEqualsWholeDecode) {
  std::mt19937 rng(1234);
  const unsigned char interesting[] = {0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0,
                                       0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xE1, 0xED,
                                       0xEE, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
  for (int trial = 0; trial < 5000; ++trial) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 16);
    for (int i = 0; i < n; ++i) {
      bytes.push_back(static_cast<char>(rng() % 4 == 0 ? rng() % 256
                                                       : interesting[rng() % sizeof(interesting)]));
    }
    std::string pending, streamed;
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t len = 1 + rng() % 3;
      pending += bytes.substr(pos, len);
      pos += len;
      pending.erase(0, AppendUtf8Lossy(pending, /*final=*/false, &streamed));
      ASSERT_LE(pending.size(), 3u);
    }
    AppendUtf8Lossy(pending, /*final=*/true, &streamed);
    ASSERT_EQ(Hex(streamed), Hex(Utf8Lossy(bytes))) << "input " << Hex(bytes);
    ASSERT_EQ(FindInvalidUtf8(streamed), absl::string_view::npos);
  }
}

TEST(FindInvalidUtf8, ReportsFirstBadOffset) {
  EXPECT_EQ(FindInvalidUtf8(""), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("plain ascii"), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8(std::string("a\0b", 3)), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("\xFF"), 0u);
  EXPECT_EQ(FindInvalidUtf8("abc\x80"), 3u);
  EXPECT_EQ(FindInvalidUtf8("ab\xC3"), 2u);            // truncated
  EXPECT_EQ(FindInvalidUtf8("\xC0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(FindInvalidUtf8("x\xED\xA0\x80"), 1u);     // surrogate
  EXPECT_EQ(FindInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xE2\x82\xAC\xE2\x82"), 3u);
}

TEST(Utf8CodePoints, EncodeDecodeRoundTrip) {
  for (uint32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFDu, 0xFFFFu,
                      0x10000u, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(cp, &s);
    EXPECT_EQ(FindInvalidUtf8(s), absl::string_view::npos) << cp;
    size_t len = 0;
    EXPECT_EQ(DecodeUtf8At(s, 0, &len), cp);
    EXPECT_EQ(len, s.size());
  }
}

// The strictness the safetensors header check relies on (moved here with the validator).
TEST(Utf8Test, FindInvalidUtf8RejectsOverlongSurrogatesAndOutOfRange) {
  EXPECT_EQ(FindInvalidUtf8("plain ascii"), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(FindInvalidUtf8("ab\xc3"), 2u);            // truncated sequence
  EXPECT_EQ(FindInvalidUtf8("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("x\xed\xa0\x80"), 1u);     // surrogate
  EXPECT_EQ(FindInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // > U+10FFFF
}

// ReadUtf8Lead agrees with FindInvalidUtf8 on every two-byte prefix: a lead byte and a first
// continuation byte are accepted together exactly when some valid character starts with them.
TEST(Utf8LeadTest, AgreesWithTheValidator) {
  for (int b0 = 0; b0 < 256; ++b0) {
    Utf8Lead lead;
    const bool starts = ReadUtf8Lead(static_cast<uint8_t>(b0), &lead);
    if (b0 < 0x80) {
      EXPECT_TRUE(starts);
      EXPECT_EQ(lead.continuations, 0);
      continue;
    }
    for (int b1 = 0x80; b1 < 0xC0; ++b1) {
      std::string text = {static_cast<char>(b0), static_cast<char>(b1)};
      text.append(starts ? lead.continuations - 1 : 0, '\x80');
      const bool valid = FindInvalidUtf8(text) == absl::string_view::npos;
      const bool ours = starts && b1 >= lead.first_low && b1 <= lead.first_high;
      EXPECT_EQ(ours, valid) << std::hex << b0 << " " << b1;
    }
  }
}

}  // namespace
// A character fed a byte at a time: the range it can still become narrows to the character.
TEST(Utf8PartialTest, FeedsCharactersAndTheRangesTheyCanStillBecome) {
  using Read = Utf8Partial::Read;
  uint32_t c = 0;
  Utf8Partial p;
  EXPECT_EQ(p.Feed('A', &c), Read::kWhole);
  EXPECT_EQ(c, uint32_t{'A'});
  EXPECT_EQ(p.Feed(0xC3, &c), Read::kPartial);  // e-acute's lead byte
  EXPECT_EQ(p.First(), 0xC0u);
  EXPECT_EQ(p.Last(), 0xFFu);
  EXPECT_FALSE(p.between_characters());
  EXPECT_EQ(p.Feed(0xA9, &c), Read::kWhole);
  EXPECT_EQ(c, 0xE9u);
  EXPECT_TRUE(p.between_characters());
  // The lead byte's limits: no surrogates after 0xED, nothing past U+10FFFF after 0xF4, no
  // overlong forms after 0xE0.
  Utf8Partial ed;
  ASSERT_EQ(ed.Feed(0xED, &c), Read::kPartial);
  EXPECT_EQ(ed.First(), 0xD000u);
  EXPECT_EQ(ed.Last(), 0xD7FFu);
  EXPECT_EQ(Utf8Partial(ed).Feed(0xA0, &c), Read::kInvalid);
  Utf8Partial f4;
  ASSERT_EQ(f4.Feed(0xF4, &c), Read::kPartial);
  EXPECT_EQ(f4.Last(), 0x10FFFFu);
  ASSERT_EQ(f4.Feed(0x8F, &c), Read::kPartial);
  EXPECT_EQ(f4.First(), 0x10F000u);
  Utf8Partial e0;
  ASSERT_EQ(e0.Feed(0xE0, &c), Read::kPartial);
  EXPECT_EQ(e0.First(), 0x800u);
  EXPECT_EQ(Utf8Partial(e0).Feed(0x9F, &c), Read::kInvalid);
  // Bytes that start nothing, and a continuation where a lead byte must come.
  for (int b : {0x80, 0xBF, 0xC0, 0xC1, 0xF5, 0xFF}) {
    EXPECT_EQ(Utf8Partial().Feed(static_cast<uint8_t>(b), &c), Read::kInvalid) << b;
  }
  // Every character's encoding feeds back to it.
  for (uint32_t cp : {0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string bytes;
    AppendUtf8(cp, &bytes);
    Utf8Partial q;
    for (size_t i = 0; i + 1 < bytes.size(); ++i) {
      ASSERT_EQ(q.Feed(static_cast<uint8_t>(bytes[i]), &c), Read::kPartial) << cp;
      EXPECT_LE(q.First(), cp);
      EXPECT_GE(q.Last(), cp);
    }
    ASSERT_EQ(q.Feed(static_cast<uint8_t>(bytes.back()), &c), Read::kWhole) << cp;
    EXPECT_EQ(c, cp);
  }
}

}  // namespace blossom
