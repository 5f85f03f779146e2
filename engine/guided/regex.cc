#include "engine/guided/regex.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/text/utf8.h"

namespace blossom {
namespace {

constexpr uint32_t kUnbounded = UINT32_MAX;
// Largest count in {n,m}, and deepest group nesting.
constexpr uint32_t kMaxRepeat = 1000;
constexpr int kMaxGroupDepth = 100;
// Entries over all the follow sets: a pattern whose epsilon closures are this large is refused
// rather than compiled into gigabytes.
constexpr size_t kMaxFollowEntries = 4 << 20;
// AST node visits while unrolling repeats.
constexpr size_t kMaxBuildCalls = 2 << 20;

CodePointClass Normalize(CodePointClass ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodePointClass out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// Every scalar value (no surrogates: UTF-8 text never holds them) outside `ranges`.
CodePointClass Complement(const CodePointClass& ranges) {
  CodePointClass all = {{0, 0xD7FF}, {0xE000, kMaxCodePoint}};
  CodePointClass out;
  for (auto [lo, hi] : all) {
    uint32_t from = lo;
    for (const auto& r : ranges) {
      if (r.second < from || r.first > hi) continue;
      if (r.first > from) out.push_back({from, r.first - 1});
      from = std::max(from, r.second + 1);
      if (r.second >= hi) {
        from = hi + 1;
        break;
      }
    }
    if (from <= hi) out.push_back({from, hi});
  }
  return out;
}

// The ASCII characters outside `ranges`.
CodePointClass AsciiComplement(const CodePointClass& ranges) {
  CodePointClass out;
  for (const auto& r : Complement(ranges)) {
    if (r.first <= 0x7F) out.push_back({r.first, std::min<uint32_t>(r.second, 0x7F)});
  }
  return out;
}

const CodePointClass& Digits() {
  static const auto* k = new CodePointClass{{'0', '9'}};
  return *k;
}
const CodePointClass& WordChars() {
  static const auto* k = new CodePointClass{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return *k;
}
const CodePointClass& Spaces() {
  static const auto* k = new CodePointClass{{'\t', '\r'}, {' ', ' '}};
  return *k;
}

struct Ast {
  enum class Kind { kClass, kConcat, kAlt, kRepeat, kEmpty };
  Kind kind = Kind::kEmpty;
  int32_t cls = -1;
  std::vector<int32_t> children;
  uint32_t min = 0, max = 0;
};

class Parser {
 public:
  explicit Parser(absl::string_view pattern) : p_(pattern) {}

  absl::StatusOr<int32_t> Parse() {
    absl::StatusOr<int32_t> root = Alt();
    if (!root.ok()) return root;
    if (i_ < p_.size()) return Error("unbalanced ')'");
    // A state that can read nothing would be a dead end for the output.
    if (empty_class_) return Error("a character class matches no character");
    return root;
  }

  std::vector<Ast> nodes;
  std::vector<CodePointClass> classes;

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex at byte ", i_, ": ", what));
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  char Peek(size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : '\0'; }

  bool OnlyEmpty(int32_t node) const {
    const Ast& a = nodes[node];
    switch (a.kind) {
      case Ast::Kind::kEmpty: return true;
      case Ast::Kind::kClass: return false;
      case Ast::Kind::kRepeat: return a.max == 0 || OnlyEmpty(a.children[0]);
      case Ast::Kind::kConcat:
      case Ast::Kind::kAlt:
        for (int32_t child : a.children) {
          if (!OnlyEmpty(child)) return false;
        }
        return true;
    }
    return true;
  }

  int32_t Add(Ast node) {
    nodes.push_back(std::move(node));
    return static_cast<int32_t>(nodes.size() - 1);
  }
  // Surrogates are taken out: text never holds them, and the matcher's check that a partly read
  // character can still match (RegexMatcher::Advance) relies on it.
  int32_t AddClass(CodePointClass ranges) {
    CodePointClass scalar;
    for (const auto& [lo, hi] : Normalize(std::move(ranges))) {
      if (lo < 0xD800) scalar.push_back({lo, std::min<uint32_t>(hi, 0xD7FF)});
      if (hi > 0xDFFF) scalar.push_back({std::max<uint32_t>(lo, 0xE000), hi});
    }
    if (scalar.empty()) empty_class_ = true;
    classes.push_back(std::move(scalar));
    Ast node;
    node.kind = Ast::Kind::kClass;
    node.cls = static_cast<int32_t>(classes.size() - 1);
    return Add(std::move(node));
  }

  absl::StatusOr<int32_t> Alt() {
    std::vector<int32_t> alternatives;
    while (true) {
      absl::StatusOr<int32_t> branch = Concat();
      if (!branch.ok()) return branch;
      alternatives.push_back(*branch);
      if (Peek() != '|' || AtEnd()) break;
      ++i_;
    }
    if (alternatives.size() == 1) return alternatives[0];
    Ast node;
    node.kind = Ast::Kind::kAlt;
    node.children = std::move(alternatives);
    return Add(std::move(node));
  }

  absl::StatusOr<int32_t> Concat() {
    Ast node;
    node.kind = Ast::Kind::kConcat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      absl::StatusOr<int32_t> item = Repeat();
      if (!item.ok()) return item;
      node.children.push_back(*item);
    }
    if (node.children.size() == 1) return node.children[0];
    return Add(std::move(node));
  }

  // A {n}, {n,} or {n,m} quantifier at i_, or false (then '{' is a literal, as in Python).
  bool Braces(uint32_t* min, uint32_t* max, size_t* length) const {
    size_t j = i_ + 1;
    auto number = [&](uint32_t* out) {
      const size_t from = j;
      uint64_t v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        v = std::min<uint64_t>(v * 10 + (p_[j++] - '0'), kMaxRepeat + 1);  // saturates
      }
      *out = static_cast<uint32_t>(v);
      return j > from;
    };
    // {n}, {n,}, {n,m}, and Python's {,m} (= {0,m}).
    const bool has_min = number(min);
    if (!has_min) *min = 0;
    *max = *min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(max)) *max = kUnbounded;
    } else if (!has_min) {
      return false;
    }
    if (!has_min && *max == kUnbounded) return false;  // "{,}" is literal text in Python
    if (j >= p_.size() || p_[j] != '}') return false;
    *length = j + 1 - i_;
    return true;
  }

  absl::StatusOr<int32_t> Repeat() {
    absl::StatusOr<int32_t> atom = Atom();
    if (!atom.ok()) return atom;
    bool quantified = false;
    while (!AtEnd()) {
      uint32_t min = 0, max = 0;
      size_t length = 1;
      const char c = Peek();
      if (c == '*') {
        min = 0, max = kUnbounded;
      } else if (c == '+') {
        min = 1, max = kUnbounded;
      } else if (c == '?') {
        min = 0, max = 1;
      } else if (c != '{' || !Braces(&min, &max, &length)) {
        break;
      }
      if (quantified) return Error("multiple repeat");
      if ((max != kUnbounded && max > kMaxRepeat) || min > kMaxRepeat) {
        return Error(absl::StrCat("a repeat count above ", kMaxRepeat));
      }
      if (max < min) return Error("a repeat {n,m} with m < n");
      i_ += length;
      if (Peek() == '?') ++i_;  // lazy: the same language
      if (Peek() == '+') return Error("possessive quantifiers are not supported");
      quantified = true;
      // A repeat of what can only match "" (an empty group, x{0}) is "" itself: unrolled, it
      // would build nothing yet cost a pass per copy, and nested {1000}s multiply.
      if (max == 0 || OnlyEmpty(*atom)) {
        atom = Add(Ast{});
        continue;
      }
      Ast node;
      node.kind = Ast::Kind::kRepeat;
      node.children = {*atom};
      node.min = min;
      node.max = max;
      atom = Add(std::move(node));
    }
    return atom;
  }

  // One UTF-8 character of the pattern, strictly (no overlong forms, surrogates or values past
  // U+10FFFF: a class of such a value would match nothing a text can hold).
  absl::StatusOr<uint32_t> CodePoint() {
    Utf8Lead lead;
    if (!ReadUtf8Lead(static_cast<uint8_t>(p_[i_]), &lead) ||
        i_ + lead.continuations >= p_.size() + (lead.continuations == 0 ? 1 : 0)) {
      return Error("invalid UTF-8");
    }
    uint32_t cp = lead.bits;
    for (int k = 1; k <= lead.continuations; ++k) {
      const unsigned char b = static_cast<unsigned char>(p_[i_ + k]);
      if (b < (k == 1 ? lead.first_low : 0x80) || b > (k == 1 ? lead.first_high : 0xBF)) {
        return Error("invalid UTF-8");
      }
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += lead.continuations + 1;
    return cp;
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      const char c = Peek();
      const int d = c >= '0' && c <= '9' ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (AtEnd() || d < 0) return Error("a hex escape needs hex digits");
      v = v * 16 + d;
    }
    return v;
  }

  // The escape after a backslash at i_ (which is consumed): a class (\d, ...) or one character.
  absl::StatusOr<CodePointClass> Escape(bool in_class) {
    ++i_;
    if (AtEnd()) return Error("a pattern cannot end with a backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': return Digits();
      // The negated shorthands are ASCII too: Python's and ECMA-262's \D, \W and \S leave out
      // Unicode digits, letters and spaces this class set does not name, so the complement of
      // the ASCII set would accept some of those. Narrower is safe: every match is theirs.
      case 'D': return AsciiComplement(Digits());
      case 'w': return WordChars();
      case 'W': return AsciiComplement(WordChars());
      case 's': return Spaces();
      case 'S': return AsciiComplement(Spaces());
      case 'n': return CodePointClass{{'\n', '\n'}};
      case 't': return CodePointClass{{'\t', '\t'}};
      case 'r': return CodePointClass{{'\r', '\r'}};
      case 'f': return CodePointClass{{'\f', '\f'}};
      case 'v': return CodePointClass{{'\v', '\v'}};
      case 'x':
      case 'u': {
        absl::StatusOr<uint32_t> v = Hex(c == 'x' ? 2 : 4);
        if (!v.ok()) return v.status();
        if (*v >= 0xD800 && *v <= 0xDFFF) return Error("a surrogate code point");
        return CodePointClass{{*v, *v}};
      }
      case 'b':
        if (in_class) return CodePointClass{{'\b', '\b'}};
        return Error("\\b (word boundary) is not supported");
      default:
        break;
    }
    if (c >= '0' && c <= '9') return Error("backreferences are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      return Error(absl::StrCat("\\", std::string(1, c), " is not supported"));
    }
    --i_;
    absl::StatusOr<uint32_t> literal = CodePoint();
    if (!literal.ok()) return literal.status();
    return CodePointClass{{*literal, *literal}};
  }

  absl::StatusOr<int32_t> Class() {
    ++i_;  // '['
    const bool negated = Peek() == '^';
    if (negated) ++i_;
    CodePointClass ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("an unterminated [");
      if (Peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      absl::StatusOr<CodePointClass> item =
          Peek() == '\\' ? Escape(/*in_class=*/true) : [&]() -> absl::StatusOr<CodePointClass> {
            absl::StatusOr<uint32_t> cp = CodePoint();
            if (!cp.ok()) return cp.status();
            return CodePointClass{{*cp, *cp}};
          }();
      if (!item.ok()) return item.status();
      const bool single = item->size() == 1 && (*item)[0].first == (*item)[0].second;
      if (single && Peek() == '-' && Peek(1) != ']' && i_ + 1 < p_.size()) {
        ++i_;
        absl::StatusOr<CodePointClass> high =
            Peek() == '\\' ? Escape(/*in_class=*/true) : [&]() -> absl::StatusOr<CodePointClass> {
              absl::StatusOr<uint32_t> cp = CodePoint();
              if (!cp.ok()) return cp.status();
              return CodePointClass{{*cp, *cp}};
            }();
        if (!high.ok()) return high.status();
        if (high->size() != 1 || (*high)[0].first != (*high)[0].second) {
          return Error("a class range must end with one character");
        }
        if ((*high)[0].first < (*item)[0].first) return Error("a class range out of order");
        ranges.push_back({(*item)[0].first, (*high)[0].first});
        continue;
      }
      ranges.insert(ranges.end(), item->begin(), item->end());
    }
    ranges = Normalize(std::move(ranges));
    return AddClass(negated ? Complement(ranges) : ranges);
  }

  absl::StatusOr<int32_t> Atom() {
    const char c = Peek();
    switch (c) {
      case '(': {
        ++i_;
        if (Peek() == '?') {
          if (Peek(1) == ':') {
            i_ += 2;
          } else if ((Peek(1) == 'P' && Peek(2) == '<') ||
                     (Peek(1) == '<' && Peek(2) != '=' && Peek(2) != '!')) {
            const size_t close = p_.find('>', i_);
            if (close == absl::string_view::npos) return Error("an unterminated group name");
            i_ = close + 1;
          } else {
            return Error("lookaround, flags and other (?...) groups are not supported");
          }
        }
        if (++depth_ > kMaxGroupDepth) return Error("groups nest too deep");
        absl::StatusOr<int32_t> inner = Alt();
        --depth_;
        if (!inner.ok()) return inner;
        if (Peek() != ')' || AtEnd()) return Error("an unterminated (");
        ++i_;
        return inner;
      }
      case '[': return Class();
      case '.': {
        // Any character but the line terminators of ECMA-262 (\n, \r, U+2028, U+2029), which
        // is also within Python's (any but \n).
        ++i_;
        return AddClass(Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      }
      case '\\': {
        absl::StatusOr<CodePointClass> escape = Escape(/*in_class=*/false);
        if (!escape.ok()) return escape.status();
        return AddClass(*std::move(escape));
      }
      case '^':
        if (i_ != 0) return Error("^ is only supported at the start");
        ++i_;
        return Add(Ast{});
      case '$':
        if (i_ + 1 != p_.size()) return Error("$ is only supported at the end");
        ++i_;
        return Add(Ast{});
      case '*':
      case '+':
      case '?':
        return Error("nothing to repeat");
      case ')':
        return Error("unbalanced ')'");
      default: {
        absl::StatusOr<uint32_t> cp = CodePoint();
        if (!cp.ok()) return cp.status();
        return AddClass({{*cp, *cp}});
      }
    }
  }

  absl::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;
  bool empty_class_ = false;
};

// The NFA with epsilon states, built backwards from the accepting state.
class Builder {
 public:
  Builder(const std::vector<Ast>& ast) : ast_(ast) {}

  struct EState {
    int32_t cls = -1;              // reading state when >= 0
    std::vector<int32_t> targets;  // the next state (reading), or epsilon targets
    bool accept = false;
  };
  std::vector<EState> states;

  absl::StatusOr<int32_t> Accept() {
    EState s;
    s.accept = true;
    return New(std::move(s));
  }

  absl::StatusOr<int32_t> Build(int32_t node, int32_t next) {
    // Each call visits one AST node of one copy; unrolled repeats make many copies.
    if (++calls_ > kMaxBuildCalls) {
      return absl::InvalidArgumentError("regex: too large once repeats are unrolled");
    }
    const Ast& a = ast_[node];
    switch (a.kind) {
      case Ast::Kind::kEmpty: return next;
      case Ast::Kind::kClass: {
        EState s;
        s.cls = a.cls;
        s.targets = {next};
        return New(std::move(s));
      }
      case Ast::Kind::kConcat:
        for (size_t k = a.children.size(); k-- > 0;) {
          absl::StatusOr<int32_t> s = Build(a.children[k], next);
          if (!s.ok()) return s;
          next = *s;
        }
        return next;
      case Ast::Kind::kAlt: {
        EState split;
        for (int32_t child : a.children) {
          absl::StatusOr<int32_t> s = Build(child, next);
          if (!s.ok()) return s;
          split.targets.push_back(*s);
        }
        return New(std::move(split));
      }
      case Ast::Kind::kRepeat: {
        int32_t tail = next;
        const int32_t child = a.children[0];
        if (a.max == kUnbounded) {
          absl::StatusOr<int32_t> loop = New(EState{});
          if (!loop.ok()) return loop;
          absl::StatusOr<int32_t> body = Build(child, *loop);
          if (!body.ok()) return body;
          states[*loop].targets = {*body, next};
          tail = *loop;
        } else {
          for (uint32_t k = a.min; k < a.max; ++k) {
            absl::StatusOr<int32_t> body = Build(child, tail);
            if (!body.ok()) return body;
            EState split;
            split.targets = {*body, next};
            absl::StatusOr<int32_t> s = New(std::move(split));
            if (!s.ok()) return s;
            tail = *s;
          }
        }
        for (uint32_t k = 0; k < a.min; ++k) {
          absl::StatusOr<int32_t> s = Build(child, tail);
          if (!s.ok()) return s;
          tail = *s;
        }
        return tail;
      }
    }
    return next;
  }

 private:
  absl::StatusOr<int32_t> New(EState s) {
    if (states.size() >= kMaxRegexStates) {
      return absl::InvalidArgumentError(
          absl::StrCat("regex: more than ", kMaxRegexStates, " states once repeats are unrolled"));
    }
    states.push_back(std::move(s));
    return static_cast<int32_t>(states.size() - 1);
  }

  const std::vector<Ast>& ast_;
  size_t calls_ = 0;
};

}  // namespace

bool ClassContains(const CodePointClass& ranges, uint32_t code_point) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(),
                             std::make_pair(code_point, kMaxCodePoint + 1));
  return it != ranges.begin() && std::prev(it)->second >= code_point;
}

bool ClassIntersects(const CodePointClass& ranges, uint32_t first, uint32_t last) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(first, kMaxCodePoint + 1));
  if (it != ranges.begin() && std::prev(it)->second >= first) return true;
  return it != ranges.end() && it->first <= last;
}

absl::StatusOr<RegexNfa> CompileRegex(absl::string_view pattern) {
  if (pattern.size() > kMaxRegexBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: longer than ", kMaxRegexBytes, " bytes"));
  }
  Parser parser(pattern);
  absl::StatusOr<int32_t> root = parser.Parse();
  if (!root.ok()) return root.status();
  Builder builder(parser.nodes);
  absl::StatusOr<int32_t> accept = builder.Accept();
  if (!accept.ok()) return accept.status();
  absl::StatusOr<int32_t> start = builder.Build(*root, *accept);
  if (!start.ok()) return start.status();

  // Keep the reading and accepting states; resolve epsilon moves into follow sets.
  const std::vector<Builder::EState>& e = builder.states;
  std::vector<int32_t> compact(e.size(), -1);
  RegexNfa nfa;
  nfa.classes = std::move(parser.classes);
  for (size_t k = 0; k < e.size(); ++k) {
    if (e[k].cls >= 0 || e[k].accept) {
      compact[k] = static_cast<int32_t>(nfa.states.size());
      nfa.states.push_back({e[k].cls, {}});
    }
  }
  std::vector<uint32_t> seen(e.size(), 0);
  uint32_t visit = 0;
  size_t entries = 0;
  auto closure = [&](int32_t from, std::vector<int32_t>* out) {
    ++visit;
    std::vector<int32_t> stack = {from};
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (seen[s] == visit) continue;
      seen[s] = visit;
      if (compact[s] >= 0) {
        out->push_back(compact[s]);
      } else {
        stack.insert(stack.end(), e[s].targets.begin(), e[s].targets.end());
      }
    }
    std::sort(out->begin(), out->end());
    entries += out->size();
  };
  closure(*start, &nfa.start);
  for (size_t k = 0; k < e.size(); ++k) {
    if (e[k].cls < 0) continue;
    closure(e[k].targets[0], &nfa.states[compact[k]].follow);
    if (entries > kMaxFollowEntries) {
      return absl::InvalidArgumentError(
          "regex: too ambiguous (its state sets would take too much memory)");
    }
  }
  return nfa;
}

}  // namespace blossom
