// UTF-8 validation and lossy decoding with the exact replacement rules of Python's
// `bytes.decode("utf-8", errors="replace")` and Rust's `String::from_utf8_lossy` (which Hugging
// Face tokenizers uses when decoding): every maximal subpart of an ill-formed sequence becomes one
// U+FFFD (Unicode 15, section 3.9, "U+FFFD Substitution of Maximal Subparts"; also the WHATWG
// Encoding Standard). Both libraries follow that rule, so decoded text compares byte-for-byte.
//
// Stateless free functions: safe to call from any thread.
#ifndef BLOSSOM_ENGINE_TEXT_UTF8_H_
#define BLOSSOM_ENGINE_TEXT_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace blossom {

// U+FFFD REPLACEMENT CHARACTER, UTF-8 encoded.
inline constexpr absl::string_view kUtf8Replacement = "\xEF\xBF\xBD";

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms,
// surrogates, code points above U+10FFFF and truncated sequences are all ill-formed), or npos
// when `bytes` is entirely well-formed.
size_t FindInvalidUtf8(absl::string_view bytes);

// What a UTF-8 lead byte starts, for byte-at-a-time readers (the grammar matchers of
// engine/guided): how many continuation bytes follow (0 for ASCII), the range the first of them
// must be in (the others are 0x80-0xBF; the range rules out overlong forms, surrogates and code
// points above U+10FFFF), the lead byte's payload bits, and the least code point of that length.
struct Utf8Lead {
  int continuations = 0;
  uint8_t first_low = 0x80;
  uint8_t first_high = 0xBF;
  uint32_t bits = 0;
  uint32_t floor = 0;
};
// False for a byte that starts no character (0x80-0xC1, 0xF5-0xFF).
bool ReadUtf8Lead(uint8_t byte, Utf8Lead* lead);

// A character read a byte at a time, for the grammar matchers of engine/guided, which must
// refuse a partly read character as soon as nothing it can become is allowed (else a lead byte
// alone could lead the output into a dead end). A value type: copy it, then Feed the copy.
struct Utf8Partial {
  enum class Read { kInvalid, kPartial, kWhole };

  // Reads `byte` after the bytes so far. kWhole: *code_point is the character, and this is
  // between characters again. kPartial: the character is one of [First(), Last()], exactly the
  // characters the bytes so far can still become (the range holds no surrogate: it follows the
  // next byte's limits). kInvalid: no character goes on so (this is then unspecified).
  // First() and Last() only while a character is partly read.
  Read Feed(uint8_t byte, uint32_t* code_point);
  bool between_characters() const { return pending == 0; }
  uint32_t First() const;
  uint32_t Last() const;
  // Appends the fields, for matchers' cache keys.
  void AppendKey(std::string* key) const;

  uint32_t bits = 0;        // the character's bits so far
  uint32_t floor = 0;       // the least code point of its length (no overlong forms)
  uint8_t pending = 0;      // continuation bytes still to come
  uint8_t next_low = 0x80;  // the range of the next continuation byte
  uint8_t next_high = 0xBF;
};

// Decodes the code point starting at `bytes[pos]`, which the caller has validated. Sets *length
// to its byte length (1..4).
uint32_t DecodeUtf8At(absl::string_view bytes, size_t pos, size_t* length);

// Appends the UTF-8 encoding of `code_point` (<= U+10FFFF, not a surrogate) to *out.
void AppendUtf8(uint32_t code_point, std::string* out);

// Appends the lossy decoding of `bytes` to *out and returns how many bytes were consumed.
// With `final` true everything is consumed: a truncated sequence at the end becomes one U+FFFD.
// With `final` false a trailing sequence that is a valid prefix of a character (and so could
// still be completed by later bytes) is left unconsumed; feeding the rest later gives exactly
// the output of one call over the concatenation. This is what makes streaming decode agree
// with batch decode.
size_t AppendUtf8Lossy(absl::string_view bytes, bool final, std::string* out);

// One-shot lossy decode (final = true).
std::string Utf8Lossy(absl::string_view bytes);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_TEXT_UTF8_H_
