// Streaming detokenization of one generated sequence.
//
// Tokens are byte-level: one token may end in the middle of a multi-byte UTF-8 character that
// the next token completes. Push() returns only text that is final, holding back a trailing
// partial character; bytes that can no longer become a character are emitted as U+FFFD exactly
// where the batch decode would put them. Hence, for any id sequence,
//   Push(id_1) + ... + Push(id_n) + Flush() == tokenizer->Decode({id_1..id_n},
//   skip_special_tokens).
//
// Thread-safety: not thread-safe; use one instance per sequence. The Tokenizer must outlive it
// (it is immutable, so many decoders may share one).
#ifndef BLOSSOM_ENGINE_TOKENIZER_INCREMENTAL_DECODER_H_
#define BLOSSOM_ENGINE_TOKENIZER_INCREMENTAL_DECODER_H_

#include <cstdint>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace blossom {

class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens);

  IncrementalDecoder(const IncrementalDecoder&) = delete;
  IncrementalDecoder& operator=(const IncrementalDecoder&) = delete;

  // Appends one token and returns the newly completed text (possibly empty). Ids without a token
  // contribute nothing, as in Tokenizer::Decode.
  std::string Push(int32_t id);
  // Ends the sequence: a held partial character becomes U+FFFD. Pushing afterwards starts
  // from a clean byte state but keeps text().
  std::string Flush();
  // Everything returned by Push and Flush so far.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // at most 3 bytes: a valid but incomplete UTF-8 prefix
  std::string text_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_TOKENIZER_INCREMENTAL_DECODER_H_
