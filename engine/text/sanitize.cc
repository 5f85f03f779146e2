#include "engine/text/sanitize.h"

#include "absl/strings/str_format.h"

namespace blossom {

std::string SanitizeForMessage(absl::string_view text, size_t max_len) {
  std::string out;
  bool cut = text.size() > max_len;
  if (cut) text = text.substr(0, max_len);
  out.reserve(text.size());
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(ch);
    }
  }
  if (cut) out += "...";
  return out;
}

}  // namespace blossom
