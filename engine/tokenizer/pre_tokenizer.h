// The pre-tokenizer of BLOOM-style tokenizer.json files: BLOOM's Split regex (a hand-written
// matcher) and GPT-2's ByteLevel byte <-> character map, which the ByteLevel pre-tokenizer and
// decoder share. The Tokenizer (tokenizer.h) splits text into words with these, then runs BPE on
// each word.
//
// Each piece mirrors huggingface/tokenizers (named in comments) so that ids match exactly; kept
// apart from BPE because this is where the Unicode character classes live, and it can be tested
// without a tokenizer.json. Stateless free functions and immutable tables: safe to call from any
// thread.
#ifndef BLOSSOM_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
#define BLOSSOM_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace blossom {

// BLOOM's Split pattern, as it appears in tokenizer.json after JSON unescaping.
// The escaped bytes are … 。 ， 、 । ۔ ، in UTF-8.
inline constexpr absl::string_view kBloomSplitPattern =
    " ?[^(\\s|[.,!?"
    "\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C"
    "])]+";

// GPT-2's byte <-> character map (ByteLevel in tokenizers/src/pre_tokenizers/byte_level.rs):
// printable bytes map to themselves, the other 68 bytes in increasing order to U+0100 + k.
struct ByteLevelTables {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[512];  // every mapped code point is < 0x144

  ByteLevelTables() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t{-1});
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

// The tables, built on first use and never freed.
const ByteLevelTables& ByteLevel();

// Unicode White_Space: what both Oniguruma's \s (BLOOM's Split regex) and the Rust regex crate's
// \s (lstrip/rstrip of added tokens) match. Verified against tokenizers 0.23 over every code point.
bool IsWhiteSpace(uint32_t cp);

// Split{BLOOM's regex, Isolated} over valid UTF-8 `piece`: calls `word` on every match and on
// every non-empty gap between matches, in order, so that the words concatenate back to `piece`.
void SplitBloomWords(absl::string_view piece, absl::FunctionRef<void(absl::string_view)> word);

// The ByteLevel decoder on one token: every char mapped back to its byte, or, if any char is
// outside the map (e.g. an added token containing a space), the token's own UTF-8 bytes.
std::string ByteLevelDecodeToken(absl::string_view token);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
