#include "engine/tokenizer/pre_tokenizer.h"

#include "engine/text/utf8.h"

namespace blossom {
namespace {

// Code points outside the class [^(\s|[.,!?…。，、।۔،])] of BLOOM's pattern. Note that the nested
// class is a union, so '(' ')' '|' are excluded literally and '[' ']' are not.
bool IsSplitDelimiter(uint32_t cp) {
  switch (cp) {
    case '(':
    case ')':
    case '|':
    case '.':
    case ',':
    case '!':
    case '?':
    case 0x2026:  // …
    case 0x3002:  // 。
    case 0xFF0C:  // ，
    case 0x3001:  // 、
    case 0x0964:  // ।
    case 0x06D4:  // ۔
    case 0x060C:  // ،
      return true;
    default:
      return IsWhiteSpace(cp);
  }
}

}  // namespace

const ByteLevelTables& ByteLevel() {
  static const ByteLevelTables* const tables = new ByteLevelTables();
  return *tables;
}

bool IsWhiteSpace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Split{BLOOM's regex, Isolated}: a match is an optional ' ' followed by one or more code points
// that are not delimiters (IsSplitDelimiter); matches and the gaps between them are both words.
// Oniguruma's leftmost-first search with a greedy class reduces to this scan: at each position
// either a non-delimiter starts a match, or a ' ' directly followed by a non-delimiter does.
void SplitBloomWords(absl::string_view piece, absl::FunctionRef<void(absl::string_view)> word) {
  auto delimiter_at = [&](size_t pos, size_t* len) {
    return IsSplitDelimiter(DecodeUtf8At(piece, pos, len));
  };
  size_t pos = 0;  // end of the previous match
  size_t i = 0;
  while (i < piece.size()) {
    size_t len, next_len;
    size_t match_start;
    size_t j;
    if (!delimiter_at(i, &len)) {
      match_start = i;
      j = i + len;
    } else if (piece[i] == ' ' && i + 1 < piece.size() && !delimiter_at(i + 1, &next_len)) {
      match_start = i;
      j = i + 1 + next_len;
    } else {
      i += len;
      continue;
    }
    while (j < piece.size() && !delimiter_at(j, &len)) j += len;
    if (pos < match_start) word(piece.substr(pos, match_start - pos));
    word(piece.substr(match_start, j - match_start));
    pos = i = j;
  }
  if (pos < piece.size()) word(piece.substr(pos));
}

std::string ByteLevelDecodeToken(absl::string_view token) {
  const ByteLevelTables& tables = ByteLevel();
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    size_t len;
    const uint32_t cp = DecodeUtf8At(token, pos, &len);
    if (cp >= 512 || tables.cp_to_byte[cp] < 0) return std::string(token);
    out.push_back(static_cast<char>(tables.cp_to_byte[cp]));
    pos += len;
  }
  return out;
}

}  // namespace blossom
