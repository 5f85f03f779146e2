#include "engine/text/utf8.h"

#include <algorithm>

namespace blossom {
namespace {

enum class SeqKind { kValid, kInvalid, kTruncated };

struct Seq {
  SeqKind kind;
  // kValid: the sequence length. kInvalid / kTruncated: the length of the maximal subpart
  // (the longest prefix that is a valid start of some well-formed sequence; at least 1).
  size_t length;
};

// Classifies the sequence starting at bytes[pos] following Table 3-7 (well-formed UTF-8 byte
// sequences) of the Unicode standard. The second byte's allowed range depends on the lead byte;
// that is what excludes overlong forms (E0, F0), surrogates (ED) and values above U+10FFFF (F4).
Seq Classify(absl::string_view bytes, size_t pos) {
  const auto b0 = static_cast<uint8_t>(bytes[pos]);
  if (b0 < 0x80) return {SeqKind::kValid, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {SeqKind::kInvalid, 1};  // 80..C1 and F5..FF never start a character.
  }
  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= bytes.size()) return {SeqKind::kTruncated, k};
    const auto b = static_cast<uint8_t>(bytes[pos + k]);
    const uint8_t min = k == 1 ? lo : 0x80;
    const uint8_t max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {SeqKind::kInvalid, k};
  }
  return {SeqKind::kValid, need};
}

}  // namespace

size_t FindInvalidUtf8(absl::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    // ASCII fast path: prompts are mostly ASCII.
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Seq seq = Classify(bytes, pos);
    if (seq.kind != SeqKind::kValid) return pos;
    pos += seq.length;
  }
  return absl::string_view::npos;
}

uint32_t DecodeUtf8At(absl::string_view bytes, size_t pos, size_t* length) {
  const auto b0 = static_cast<uint8_t>(bytes[pos]);
  auto cont = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<uint8_t>(bytes[pos + k]) & 0x3F);
  };
  if (b0 < 0x80) {
    *length = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *length = 2;
    return (static_cast<uint32_t>(b0 & 0x1F) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    *length = 3;
    return (static_cast<uint32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  }
  *length = 4;
  return (static_cast<uint32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendUtf8Lossy(absl::string_view bytes, bool final, std::string* out) {
  out->reserve(out->size() + bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Seq seq = Classify(bytes, pos);
    switch (seq.kind) {
      case SeqKind::kValid:
        out->append(bytes.data() + pos, seq.length);
        break;
      case SeqKind::kInvalid:
        out->append(kUtf8Replacement.data(), kUtf8Replacement.size());
        break;
      case SeqKind::kTruncated:
        // Only reachable at the end of `bytes`: more input may still complete it.
        if (!final) return pos;
        out->append(kUtf8Replacement.data(), kUtf8Replacement.size());
        break;
    }
    pos += seq.length;
  }
  return pos;
}

std::string Utf8Lossy(absl::string_view bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

Utf8Partial::Read Utf8Partial::Feed(uint8_t byte, uint32_t* code_point) {
  if (pending == 0) {
    Utf8Lead lead;
    if (!ReadUtf8Lead(byte, &lead)) return Read::kInvalid;
    if (lead.continuations == 0) {
      *code_point = byte;
      return Read::kWhole;
    }
    bits = lead.bits;
    floor = lead.floor;
    pending = static_cast<uint8_t>(lead.continuations);
    next_low = lead.first_low;
    next_high = lead.first_high;
    return Read::kPartial;
  }
  if (byte < next_low || byte > next_high) return Read::kInvalid;
  bits = (bits << 6) | (byte & 0x3F);
  next_low = 0x80;
  next_high = 0xBF;
  if (--pending > 0) return Read::kPartial;
  *code_point = bits;
  bits = 0;
  floor = 0;
  return Read::kWhole;
}

// The next continuation byte is within [next_low, next_high] (the lead byte's limits, which
// rule out overlong forms, surrogates and code points past U+10FFFF); any after it are free.
uint32_t Utf8Partial::First() const {
  const uint32_t with_next = (bits << 6) | (next_low & 0x3F);
  return std::max(with_next << (6 * (pending - 1)), floor);
}

uint32_t Utf8Partial::Last() const {
  const int shift = 6 * (pending - 1);
  const uint32_t with_next = (bits << 6) | (next_high & 0x3F);
  return std::min<uint32_t>((with_next << shift) | ((1u << shift) - 1), 0x10FFFF);
}

void Utf8Partial::AppendKey(std::string* key) const {
  const uint32_t fields[] = {bits, floor, pending, next_low, next_high};
  key->append(reinterpret_cast<const char*>(fields), sizeof(fields));
}

bool ReadUtf8Lead(uint8_t byte, Utf8Lead* lead) {
  *lead = Utf8Lead();
  if (byte < 0x80) {
    lead->bits = byte;
    return true;
  }
  if (byte >= 0xC2 && byte <= 0xDF) {
    lead->continuations = 1;
    lead->floor = 0x80;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    lead->continuations = 2;
    lead->floor = 0x800;
    if (byte == 0xE0) lead->first_low = 0xA0;
    if (byte == 0xED) lead->first_high = 0x9F;  // no surrogates
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    lead->continuations = 3;
    lead->floor = 0x10000;
    if (byte == 0xF0) lead->first_low = 0x90;
    if (byte == 0xF4) lead->first_high = 0x8F;  // nothing above U+10FFFF
  } else {
    return false;
  }
  lead->bits = byte & (0x3F >> lead->continuations);
  return true;
}

}  // namespace blossom
