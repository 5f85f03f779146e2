#include "engine/tokenizer/incremental_decoder.h"

#include "engine/text/utf8.h"

namespace blossom {

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDecoder::Push(int32_t id) {
  const absl::string_view bytes = tokenizer_->DecodedBytes(id, skip_special_tokens_);
  if (bytes.empty()) return std::string();
  pending_.append(bytes.data(), bytes.size());
  std::string out;
  // The lossy decoder's choice at each position depends only on the bytes of the character that
  // starts there, so decoding everything but an unfinished tail is already final.
  const size_t consumed = AppendUtf8Lossy(pending_, /*final=*/false, &out);
  pending_.erase(0, consumed);
  text_ += out;
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out;
  AppendUtf8Lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  text_ += out;
  return out;
}

}  // namespace blossom
