#include "engine/guided/json_matcher.h"

#include <algorithm>
#include <cstring>

namespace blossom {
namespace {

// The byte after the last one: only a complete value accepts it.
constexpr int kEnd = 256;
constexpr int32_t kRootFrame = -1;
// A key of an object without properties: a string with no length bounds.
constexpr int32_t kKeyFrame = -2;

enum RootPhase : uint8_t { kRootValue, kRootDone };
enum ObjectPhase : uint8_t { kObjOpen, kObjFirst, kObjKey, kObjColon, kObjValue, kObjAfter, kObjNext };
enum ArrayPhase : uint8_t { kArrOpen, kArrFirst, kArrAfter, kArrNext };
// After a \u escape of a high surrogate: the \, the u and the four digits of the low one.
enum StringPhase : uint8_t {
  kStrOpen, kStrBody, kStrEscape, kStrHex, kStrUtf8, kStrLowSlash, kStrLowU, kStrLowHex
};
enum NumberPhase : uint8_t {
  kNumStart, kNumSign, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumExpSign, kNumExp
};

// Digits per part of a number: enough for any double's shortest form, few enough that a model
// cannot loop on digits.
constexpr uint32_t kMaxIntegerDigits = 16;
constexpr uint32_t kMaxFractionDigits = 16;
constexpr uint32_t kMaxExponentDigits = 3;

bool IsWhitespace(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(int c) { return c >= '0' && c <= '9'; }
bool IsHex(int c) {
  return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t HexValue(int c) {
  return IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
}

// A UTF-8 continuation byte's allowed range after each lead byte (RFC 3629: no overlong forms,
// no surrogates, nothing past U+10FFFF). Index = JsonFrame::sub >> 4.
constexpr uint8_t kContinuationLow[] = {0x80, 0xA0, 0x80, 0x90, 0x80};
constexpr uint8_t kContinuationHigh[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

// sub for a lead byte: continuation bytes still to come | (range of the next one << 4); 0 = not
// a lead byte.
uint16_t LeadByte(int c) {
  if (c >= 0xC2 && c <= 0xDF) return 1;
  if (c == 0xE0) return 2 | (1 << 4);
  if (c == 0xED) return 2 | (2 << 4);
  if (c >= 0xE1 && c <= 0xEF) return 2;
  if (c == 0xF0) return 3 | (3 << 4);
  if (c >= 0xF1 && c <= 0xF3) return 3;
  if (c == 0xF4) return 3 | (4 << 4);
  return 0;
}

bool SameStack(const JsonStack& x, const JsonStack& y) {
  return x.parent == y.parent && x.depth == y.depth &&
         std::memcmp(&x.top, &y.top, sizeof(JsonFrame)) == 0;
}

}  // namespace

// One byte's step from a set of stacks. Each Step() emits the stacks that survive the byte into
// `out`; structure changes are pushes (a value starts: the byte is read again by the new frame)
// and pops (a value ended: by its last byte, or by a byte its parent reads, as after a number).
class JsonMatcher::Stepper {
 public:
  Stepper(const JsonGrammar& grammar, JsonLinkArena& arena, JsonState* out)
      : g_(grammar), arena_(arena), out_(out) {}

  void Step(JsonStack s, int c) {
    const int32_t node = s.top.node;
    if (node == kRootFrame) return Root(s, c);
    if (node == kKeyFrame) return String(s, 0, kJsonUnbounded, nullptr, c);
    const JsonNode& n = g_.nodes[node];
    switch (n.kind) {
      case JsonNode::Kind::kUnion:
        // Alternatives are never unions (flattened at compilation); one that cannot finish
        // within the depth left is not entered.
        for (int32_t alternative : n.alternatives) {
          if (!FitsAbove(s.depth - 1, alternative)) continue;
          JsonStack t = s;
          t.top = JsonFrame{};
          t.top.node = alternative;
          Step(t, c);
        }
        return;
      case JsonNode::Kind::kObject: return Object(s, n, c);
      case JsonNode::Kind::kArray: return Array(s, n, c);
      case JsonNode::Kind::kString:
        return String(s, n.min_length, n.max_length,
                      n.pattern >= 0 ? &g_.patterns[n.pattern] : nullptr, c);
      case JsonNode::Kind::kNumber: return Number(s, n, c);
      case JsonNode::Kind::kLiteral: return Literal(s, n, c);
    }
  }

 private:
  void Emit(const JsonStack& s) {
    for (const JsonStack& e : *out_) {
      if (SameStack(e, s)) return;
    }
    if (out_->size() < kMaxJsonStacks) out_->push_back(s);
  }

  // `s` is the parent, already moved past the value; the value's frame reads `c`.
  // True when a value of `node` in a frame above `depth` frames can be finished within
  // kMaxJsonOutputDepth (min_depth is huge for a value that never ends).
  bool FitsAbove(uint32_t depth, int32_t node) const {
    const uint32_t need = node == kKeyFrame ? 1 : g_.nodes[node].min_depth;
    return need <= kMaxJsonOutputDepth && depth + need <= kMaxJsonOutputDepth;
  }
  bool Fits(const JsonStack& s, int32_t node) const { return FitsAbove(s.depth, node); }

  // Some property may come next in object frame `s` (keys from f.a up to the first required
  // one), and its value fits.
  bool AnyKeyFits(const JsonStack& s, const JsonNode& n) const {
    if (n.keys.empty()) return n.additional >= 0 && Fits(s, n.additional);
    if (s.top.a >= n.keys.size()) return false;
    const uint32_t last = std::min<uint32_t>(n.next_required[s.top.a],
                                             static_cast<uint32_t>(n.keys.size()) - 1);
    for (uint32_t j = s.top.a; j <= last; ++j) {
      if (Fits(s, n.values[j])) return true;
    }
    return false;
  }

  void Push(const JsonStack& s, int32_t node, int c) {
    if (!Fits(s, node) || c == kEnd) return;
    JsonStack child;
    child.top.node = node;
    child.parent = arena_.New(s.top, s.parent);
    child.depth = s.depth + 1;
    Step(child, c);
  }

  static JsonStack Parent(const JsonStack& s) {
    JsonStack p;
    p.top = s.parent->frame;
    p.parent = s.parent->parent;
    p.depth = s.depth - 1;
    return p;
  }
  void PopConsumed(const JsonStack& s) { Emit(Parent(s)); }
  void PopReprocess(const JsonStack& s, int c) { Step(Parent(s), c); }

  // True when `c` is whitespace, handled here: allowed up to the run limit.
  bool Whitespace(JsonStack& s, int c) {
    if (!IsWhitespace(c)) {
      s.top.ws = 0;
      return false;
    }
    if (s.top.ws < g_.max_whitespace) {
      ++s.top.ws;
      Emit(s);
    }
    return true;
  }

  void Root(JsonStack s, int c) {
    if (s.top.phase == kRootDone) {
      if (c == kEnd) Emit(s);
      return;
    }
    if (Whitespace(s, c)) return;
    s.top.phase = kRootDone;
    Push(s, g_.root, c);
  }

  static bool CanClose(const JsonNode& n, const JsonFrame& f) {
    return n.keys.empty() || n.next_required[f.a] == n.keys.size();
  }

  void Object(JsonStack s, const JsonNode& n, int c) {
    JsonFrame& f = s.top;
    switch (f.phase) {
      case kObjOpen:
        if (c == '{') {
          f.phase = kObjFirst;
          Emit(s);
        }
        return;
      case kObjFirst:
      case kObjNext:
        if (Whitespace(s, c)) return;
        if (c == '}' && f.phase == kObjFirst && CanClose(n, f)) return PopConsumed(s);
        if (c != '"' || !AnyKeyFits(s, n)) return;
        if (!n.keys.empty()) {
          f.phase = kObjKey;
          f.b = f.a;
          f.sub = 1;  // every key starts with its quote
          return Emit(s);
        }
        if (n.additional < 0) return;
        f.phase = kObjColon;
        return Push(s, kKeyFrame, c);
      case kObjKey: {
        // The smallest allowed key that continues the bytes read (those of key f.b so far).
        const size_t pos = f.sub;
        const std::string& read = n.keys[f.b];
        const uint32_t last = std::min<uint32_t>(n.next_required[f.a],
                                                 static_cast<uint32_t>(n.keys.size()) - 1);
        for (uint32_t j = f.a; j <= last; ++j) {
          const std::string& key = n.keys[j];
          if (key.size() <= pos || static_cast<unsigned char>(key[pos]) != c ||
              std::memcmp(key.data(), read.data(), pos) != 0 || !Fits(s, n.values[j])) {
            continue;
          }
          f.b = j;
          f.sub = static_cast<uint16_t>(pos + 1);
          if (pos + 1 == key.size()) {
            f.phase = kObjColon;
            f.a = j + 1;
            f.sub = 0;
          }
          return Emit(s);
        }
        return;
      }
      case kObjColon:
        if (Whitespace(s, c)) return;
        if (c == ':') {
          f.phase = kObjValue;
          Emit(s);
        }
        return;
      case kObjValue:
        if (Whitespace(s, c)) return;
        f.phase = kObjAfter;
        return Push(s, n.keys.empty() ? n.additional : n.values[f.b], c);
      case kObjAfter:
        if (Whitespace(s, c)) return;
        if (c == ',' && AnyKeyFits(s, n)) {
          f.phase = kObjNext;
          return Emit(s);
        }
        if (c == '}' && CanClose(n, f)) return PopConsumed(s);
        return;
    }
  }

  void Array(JsonStack s, const JsonNode& n, int c) {
    JsonFrame& f = s.top;
    // The count is only told apart up to the bound that matters, so that states (and the masks
    // cached by them) do not differ per item.
    const uint32_t cap = n.max_items != kJsonUnbounded ? n.max_items : n.min_items;
    switch (f.phase) {
      case kArrOpen:
        if (c == '[') {
          f.phase = kArrFirst;
          Emit(s);
        }
        return;
      case kArrFirst:
        if (Whitespace(s, c)) return;
        if (c == ']' && n.min_items == 0) return PopConsumed(s);
        if (n.max_items == 0 || n.items < 0) return;
        f.phase = kArrAfter;
        f.a = std::min<uint32_t>(1, cap);
        return Push(s, n.items, c);
      case kArrAfter:
        if (Whitespace(s, c)) return;
        if (c == ',' && f.a < n.max_items && Fits(s, n.items)) {
          f.phase = kArrNext;
          return Emit(s);
        }
        if (c == ']' && f.a >= n.min_items) return PopConsumed(s);
        return;
      case kArrNext:
        if (Whitespace(s, c)) return;
        f.phase = kArrAfter;
        f.a = std::min<uint32_t>(f.a + 1, cap);
        return Push(s, n.items, c);
    }
  }

  // The code points a partly read UTF-8 character can still become: its pending continuation
  // bytes' bits are free; its length sets the floor (no overlong forms).
  static std::pair<uint32_t, uint32_t> Utf8Range(const JsonFrame& f) {
    const int pending = f.sub & 15;
    const int length = (f.sub >> 8) & 15;
    const uint32_t floor = length == 1 ? 0x80 : length == 2 ? 0x800 : 0x10000;
    const uint32_t bits = f.b << (6 * pending);
    return {std::max(bits, floor), std::min<uint32_t>(bits | ((1u << (6 * pending)) - 1), 0x10FFFF)};
  }

  // Strings. With a pattern or format (`dfa`), each whole character steps the DFA (f.dfa), a
  // partly read one (UTF-8 bytes, \u digits) must still be able to become a character the DFA
  // takes, and the closing quote needs an accepting state: the output never reaches a string it
  // cannot finish.
  void String(JsonStack s, uint32_t min_length, uint32_t max_length, const RegexDfa* dfa, int c) {
    JsonFrame& f = s.top;
    const uint32_t cap = max_length != kJsonUnbounded ? max_length : min_length;
    auto take = [&](uint32_t code_point) {
      if (dfa == nullptr) return true;
      f.dfa = dfa->Step(f.dfa, code_point);
      return f.dfa >= 0;
    };
    auto can_become = [&](uint32_t first, uint32_t last) {
      return first <= last && (dfa == nullptr || dfa->AnyLive(f.dfa, first, last));
    };
    switch (f.phase) {
      case kStrOpen:
        if (c == '"') {
          f.phase = kStrBody;
          if (dfa != nullptr) f.dfa = dfa->start;
          Emit(s);
        }
        return;
      case kStrBody:
        if (c == '"') {
          if (f.a >= min_length && (dfa == nullptr || dfa->accepting[f.dfa])) PopConsumed(s);
          return;
        }
        if (c == kEnd || c < 0x20 || f.a >= max_length) return;
        if (c == '\\') {
          if (dfa != nullptr && dfa->live[f.dfa].empty()) return;
          f.phase = kStrEscape;
        } else if (c >= 0x80) {
          const uint16_t lead = LeadByte(c);
          if (lead == 0) return;
          const int pending = lead & 15;
          f.sub = static_cast<uint16_t>(lead | (pending << 8));
          f.b = c & (0x3F >> pending);
          const auto [first, last] = Utf8Range(f);
          if (!can_become(first, last)) return;
          f.phase = kStrUtf8;
        } else if (!take(c)) {
          return;
        }
        f.a = std::min(f.a + 1, cap);
        return Emit(s);
      case kStrEscape: {
        if (c == 'u') {
          f.phase = kStrHex;
          f.sub = 4;
          f.b = 0;
          return Emit(s);
        }
        const int simple = c == '"' ? '"' : c == '\\' ? '\\' : c == '/' ? '/' : c == 'b' ? '\b'
                           : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r'
                           : c == 't' ? '\t' : -1;
        if (simple < 0 || !take(simple)) return;
        f.phase = kStrBody;
        return Emit(s);
      }
      case kStrHex:
      case kStrLowHex: {
        // f.b: the digits so far (low 16 bits) and, after a high surrogate, that surrogate (high
        // 16 bits). The values still reachable must hold a character: not a lone low surrogate
        // first, and only a low one after a high one.
        if (!IsHex(c)) return;
        const uint32_t high_surrogate = f.b >> 16;
        const uint32_t digits = ((f.b & 0xFFFF) << 4) | HexValue(c);
        --f.sub;
        const uint32_t low = digits << (4 * f.sub);
        const uint32_t high = low | ((1u << (4 * f.sub)) - 1);
        bool viable;
        if (f.phase == kStrHex) {
          // A character of the BMP outside the surrogates, or a high surrogate to pair.
          viable = can_become(low, std::min<uint32_t>(high, 0xD7FF)) ||
                   can_become(std::max<uint32_t>(low, 0xE000), high);
          const uint32_t first_high = std::max<uint32_t>(low, 0xD800);
          const uint32_t last_high = std::min<uint32_t>(high, 0xDBFF);
          if (first_high <= last_high) {
            viable |= can_become(0x10000 + ((first_high - 0xD800) << 10),
                                 0x10000 + ((last_high - 0xD800) << 10) + 0x3FF);
          }
        } else {
          const uint32_t first_low = std::max<uint32_t>(low, 0xDC00);
          const uint32_t last_low = std::min<uint32_t>(high, 0xDFFF);
          const uint32_t base = 0x10000 + ((high_surrogate - 0xD800) << 10);
          viable = first_low <= last_low &&
                   can_become(base + first_low - 0xDC00, base + last_low - 0xDC00);
        }
        if (!viable) return;
        if (f.sub > 0) {
          f.b = (high_surrogate << 16) | digits;
          return Emit(s);
        }
        if (f.phase == kStrHex && digits >= 0xD800 && digits <= 0xDBFF) {
          f.phase = kStrLowSlash;
          f.b = digits << 16;
          return Emit(s);
        }
        const uint32_t code_point =
            f.phase == kStrHex ? digits
                               : 0x10000 + ((high_surrogate - 0xD800) << 10) + (digits - 0xDC00);
        if (!take(code_point)) return;
        f.phase = kStrBody;
        f.b = 0;
        return Emit(s);
      }
      case kStrLowSlash:
        if (c == '\\') {
          f.phase = kStrLowU;
          Emit(s);
        }
        return;
      case kStrLowU:
        if (c == 'u') {
          f.phase = kStrLowHex;
          f.sub = 4;
          Emit(s);
        }
        return;
      case kStrUtf8: {
        const int range = (f.sub >> 4) & 15;
        if (c < kContinuationLow[range] || c > kContinuationHigh[range]) return;
        f.b = (f.b << 6) | (c & 0x3F);
        const int pending = (f.sub & 15) - 1;
        f.sub = static_cast<uint16_t>((f.sub & 0xF00) | pending);
        if (pending == 0) {
          if (!take(f.b)) return;
          f.phase = kStrBody;
          f.b = 0;
          f.sub = 0;
        } else {
          const auto [first, last] = Utf8Range(f);
          if (!can_become(first, last)) return;
        }
        return Emit(s);
      }
    }
  }

  void Number(JsonStack s, const JsonNode& n, int c) {
    JsonFrame& f = s.top;
    const bool fraction_or_exponent = !n.integer && (c == '.' || c == 'e' || c == 'E');
    auto to = [&](uint8_t phase, uint32_t digits) {
      f.phase = phase;
      f.a = digits;
      Emit(s);
    };
    switch (f.phase) {
      case kNumStart:
      case kNumSign:
        if (c == '-' && f.phase == kNumStart) return to(kNumSign, 0);
        if (c == '0') return to(kNumZero, 1);
        if (IsDigit(c)) return to(kNumInt, 1);
        return;
      case kNumZero:
      case kNumInt:
        if (IsDigit(c) && f.phase == kNumInt) {
          if (f.a < kMaxIntegerDigits) to(kNumInt, f.a + 1);
          return;
        }
        if (fraction_or_exponent) return to(c == '.' ? kNumDot : kNumE, 0);
        if (IsDigit(c)) return;  // a leading zero
        return PopReprocess(s, c);
      case kNumDot:
        if (IsDigit(c)) to(kNumFrac, 1);
        return;
      case kNumFrac:
        if (IsDigit(c)) {
          if (f.a < kMaxFractionDigits) to(kNumFrac, f.a + 1);
          return;
        }
        if (c == 'e' || c == 'E') return to(kNumE, 0);
        return PopReprocess(s, c);
      case kNumE:
        // f.b: the exponent's digit limit, one more when negative (underflow is no error).
        f.b = c == '-' ? kMaxExponentDigits : kMaxExponentDigits - 1;
        if (c == '+' || c == '-') return to(kNumExpSign, 0);
        if (IsDigit(c)) to(kNumExp, 1);
        return;
      case kNumExpSign:
        if (IsDigit(c)) to(kNumExp, 1);
        return;
      case kNumExp:
        if (IsDigit(c)) {
          if (f.a < f.b) to(kNumExp, f.a + 1);
          return;
        }
        return PopReprocess(s, c);
    }
  }

  void Literal(JsonStack s, const JsonNode& n, int c) {
    JsonFrame& f = s.top;
    // f.a is the smallest candidate whose first f.b bytes were read; a candidate before it
    // differs there, so the search starts at it.
    const size_t pos = f.b;
    const std::string& read = n.literals[f.a];
    for (size_t j = f.a; j < n.literals.size(); ++j) {
      const std::string& lit = n.literals[j];
      if (lit.size() > pos && static_cast<unsigned char>(lit[pos]) == c &&
          std::memcmp(lit.data(), read.data(), pos) == 0) {
        f.a = static_cast<uint32_t>(j);
        f.b = static_cast<uint32_t>(pos + 1);
        return Emit(s);
      }
    }
    // No candidate continues: the value ended if one was read whole (as "1" of [1, 12] before
    // a comma); the byte is its parent's.
    for (size_t j = f.a; j < n.literals.size(); ++j) {
      const std::string& lit = n.literals[j];
      if (lit.size() == pos && std::memcmp(lit.data(), read.data(), pos) == 0) {
        return PopReprocess(s, c);
      }
    }
  }

  const JsonGrammar& g_;
  JsonLinkArena& arena_;
  JsonState* out_;
};

JsonState JsonMatcher::Start() const {
  JsonStack root;
  root.top.node = kRootFrame;
  root.top.phase = kRootValue;
  return JsonState{root};
}

void JsonMatcher::Advance(const JsonState& state, int c, JsonLinkArena& arena,
                          JsonState* next) const {
  next->clear();
  Stepper stepper(*grammar_, arena, next);
  for (const JsonStack& s : state) stepper.Step(s, c);
}

bool JsonMatcher::AdvanceAll(JsonState& state, absl::string_view bytes,
                             JsonLinkArena& arena) const {
  JsonState next;
  for (char byte : bytes) {
    Advance(state, static_cast<unsigned char>(byte), arena, &next);
    state.swap(next);
    if (state.empty()) return false;
  }
  return true;
}

bool JsonMatcher::CanEnd(const JsonState& state, JsonLinkArena& arena) const {
  JsonState next;
  Advance(state, kEnd, arena, &next);
  return !next.empty();
}

void JsonMatcher::AppendKey(const JsonState& state, std::string* key) {
  for (const JsonStack& s : state) {
    key->append(reinterpret_cast<const char*>(&s.depth), sizeof(s.depth));
    key->append(reinterpret_cast<const char*>(&s.top), sizeof(JsonFrame));
    for (const JsonLink* link = s.parent; link != nullptr; link = link->parent) {
      key->append(reinterpret_cast<const char*>(&link->frame), sizeof(JsonFrame));
    }
  }
}

}  // namespace blossom
