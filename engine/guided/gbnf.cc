#include "engine/guided/gbnf.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/text/utf8.h"

namespace blossom {
namespace {

using Kind = Grammar::Kind;
using Element = Grammar::Element;
using Elements = std::vector<Element>;

// Parentheses nest at most this deep (the parser recurses once per level).
constexpr int kMaxGroupDepth = 64;
constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// Sorted, merged, and without surrogates (no UTF-8 text holds one).
CodePointClass Normalize(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  CodePointClass merged;
  for (const auto& [first, last] : ranges) {
    if (!merged.empty() && first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, last);
    } else {
      merged.push_back({first, last});
    }
  }
  if (negate) {
    CodePointClass complement;
    uint32_t next = 0;
    for (const auto& [first, last] : merged) {
      if (first > next) complement.push_back({next, first - 1});
      next = last + 1;
    }
    if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
    merged = std::move(complement);
  }
  CodePointClass out;
  for (const auto& [first, last] : merged) {
    if (first < kSurrogateFirst) out.push_back({first, std::min(last, kSurrogateFirst - 1)});
    if (last > kSurrogateLast) out.push_back({std::max(first, kSurrogateLast + 1), last});
  }
  return out;
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Grammar> Parse() {
    Skip();
    if (pos_ == text_.size()) return Error("the grammar has no rules");
    while (pos_ < text_.size()) {
      if (!IsNameChar(text_[pos_])) return Error("expected a rule name");
      const size_t name_offset = pos_;
      const std::string name = Name();
      Skip();
      if (text_.substr(pos_, 3) != "::=") {
        return Error(absl::StrCat("expected '::=' after the rule name '", name, "'"));
      }
      pos_ += 3;
      const int32_t rule = Rule(name, name_offset);
      if (defined_[rule]) return Error(absl::StrCat("rule '", name, "' is defined twice"));
      defined_[rule] = true;
      if (absl::Status s = Alternates(rule, 0); !s.ok()) return s;
      Skip();
      if (pos_ < text_.size() && !AtRuleStart()) {
        return Error(absl::StrCat("unexpected '", CharAt(pos_), "'"));
      }
    }
    for (size_t r = 0; r < defined_.size(); ++r) {
      if (!defined_[r]) {
        pos_ = first_use_[r];
        return Error(absl::StrCat("rule '", names_[r], "' is used but not defined"));
      }
    }
    auto root = by_name_.find("root");
    if (root == by_name_.end()) {
      return absl::InvalidArgumentError("grammar: there is no 'root' rule (the whole output)");
    }
    Grammar g;
    g.root = root->second;
    g.classes = std::move(classes_);
    for (size_t r = 0; r < bodies_.size(); ++r) {
      Grammar::Rule rule;
      rule.name = names_[r];
      for (const Elements& alternative : bodies_[r]) {
        rule.alternatives.push_back(static_cast<int32_t>(g.elements.size()));
        g.elements.insert(g.elements.end(), alternative.begin(), alternative.end());
        g.elements.push_back(Element{});
      }
      g.rules.push_back(std::move(rule));
    }
    return g;
  }

 private:
  // The whole character at `at` (the text is valid UTF-8): errors quote characters, never a
  // lone byte, so that they stay valid UTF-8 in protobuf strings.
  absl::string_view CharAt(size_t at) const {
    size_t length = 1;
    DecodeUtf8At(text_, at, &length);
    return text_.substr(at, length);
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("grammar at byte ", pos_, ": ", what));
  }

  // Whitespace (newlines included) and comments.
  void Skip() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string Name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // At `name ::=`: the next rule, which ends the current one.
  bool AtRuleStart() {
    const size_t saved = pos_;
    bool at = false;
    if (pos_ < text_.size() && IsNameChar(text_[pos_])) {
      Name();
      Skip();
      at = text_.substr(pos_, 3) == "::=";
    }
    pos_ = saved;
    return at;
  }

  // The rule named `name`, declared on first sight (used before its definition).
  int32_t Rule(const std::string& name, size_t offset) {
    auto [it, inserted] = by_name_.try_emplace(name, static_cast<int32_t>(names_.size()));
    if (inserted) {
      names_.push_back(name);
      bodies_.emplace_back();
      defined_.push_back(false);
      first_use_.push_back(offset);
    }
    return it->second;
  }

  // A rule for a group or repeat inside `parent`, named after it for errors.
  int32_t Generated(int32_t parent, std::vector<Elements> alternatives) {
    names_.push_back(names_[parent]);
    bodies_.push_back(std::move(alternatives));
    defined_.push_back(true);
    first_use_.push_back(pos_);
    return static_cast<int32_t>(names_.size()) - 1;
  }

  absl::Status Count(size_t added) {
    elements_ += added;
    if (elements_ > kMaxGbnfElements) {
      return Error(absl::StrCat("the grammar has more than ", kMaxGbnfElements,
                                " elements once its repeats are spelled out"));
    }
    return absl::OkStatus();
  }

  absl::Status Alternates(int32_t rule, int depth) {
    for (;;) {
      Elements sequence;
      if (absl::Status s = Sequence(rule, depth, &sequence); !s.ok()) return s;
      bodies_[rule].push_back(std::move(sequence));
      Skip();
      if (pos_ >= text_.size() || text_[pos_] != '|') return absl::OkStatus();
      ++pos_;
    }
  }

  absl::Status Sequence(int32_t rule, int depth, Elements* out) {
    for (;;) {
      Skip();
      if (pos_ >= text_.size() || text_[pos_] == '|' || text_[pos_] == ')' || AtRuleStart()) {
        return absl::OkStatus();
      }
      const size_t unit_start = out->size();
      const char c = text_[pos_];
      absl::Status s;
      if (c == '"') {
        s = Literal(out);
      } else if (c == '[') {
        s = Class(out);
      } else if (c == '.') {
        ++pos_;
        s = AddClass(Normalize({{0, kMaxCodePoint}}, false), out);
      } else if (c == '(') {
        if (depth + 1 > kMaxGroupDepth) {
          return Error(absl::StrCat("groups nest deeper than ", kMaxGroupDepth));
        }
        ++pos_;
        const int32_t group = Generated(rule, {});
        s = Alternates(group, depth + 1);
        if (s.ok()) {
          Skip();
          if (pos_ >= text_.size() || text_[pos_] != ')') return Error("expected ')'");
          ++pos_;
          out->push_back({Kind::kRule, group});
          s = Count(1);
        }
      } else if (IsNameChar(c)) {
        const size_t offset = pos_;
        out->push_back({Kind::kRule, Rule(Name(), offset)});
        s = Count(1);
      } else {
        return Error(absl::StrCat("unexpected '", CharAt(pos_), "'"));
      }
      if (!s.ok()) return s;
      for (Skip(); pos_ < text_.size() && absl::string_view("*+?{").find(text_[pos_]) !=
                                              absl::string_view::npos;
           Skip()) {
        if (out->size() == unit_start) return Error("a repeat of nothing");
        if (absl::Status r = Repeat(rule, unit_start, out); !r.ok()) return r;
      }
    }
  }

  absl::Status AddClass(CodePointClass cls, Elements* out) {
    if (cls.empty()) return Error("a character class that matches no character");
    classes_.push_back(std::move(cls));
    out->push_back({Kind::kClass, static_cast<int32_t>(classes_.size()) - 1});
    return Count(1);
  }

  absl::Status Literal(Elements* out) {
    ++pos_;  // the opening quote
    for (;;) {
      if (pos_ >= text_.size()) return Error("a string without its closing '\"'");
      if (text_[pos_] == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      absl::StatusOr<uint32_t> c = Char();
      if (!c.ok()) return c.status();
      if (absl::Status s = AddClass({{*c, *c}}, out); !s.ok()) return s;
    }
  }

  absl::Status Class(Elements* out) {
    ++pos_;  // '['
    const bool negate = pos_ < text_.size() && text_[pos_] == '^';
    if (negate) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    for (;;) {
      if (pos_ >= text_.size()) return Error("a character class without its closing ']'");
      if (text_[pos_] == ']') {
        ++pos_;
        break;
      }
      absl::StatusOr<uint32_t> first = Char();
      if (!first.ok()) return first.status();
      uint32_t last = *first;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        absl::StatusOr<uint32_t> end = Char();
        if (!end.ok()) return end.status();
        if (*end < *first) return Error("a character range whose end comes before its start");
        last = *end;
      }
      ranges.push_back({*first, last});
    }
    return AddClass(Normalize(std::move(ranges), negate), out);
  }

  // One character of a literal or class, escapes resolved.
  absl::StatusOr<uint32_t> Char() {
    if (text_[pos_] != '\\') {
      size_t length = 1;
      const uint32_t c = DecodeUtf8At(text_, pos_, &length);
      pos_ += length;
      return c;
    }
    if (pos_ + 1 >= text_.size()) return Error("an escape at the end of the grammar");
    const char e = text_[pos_ + 1];
    pos_ += 2;
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
        return static_cast<uint32_t>(e);
      case 'x': return Hex(2);
      case 'u': return Hex(4);
      case 'U': return Hex(8);
      default:
        pos_ -= 2;
        return Error(absl::StrCat("unknown escape '\\", CharAt(pos_ + 1), "'"));
    }
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint64_t value = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char c = pos_ < text_.size() ? text_[pos_] : '\0';
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return Error(absl::StrCat("an escape needs ", digits, " hex digits"));
      value = value * 16 + d;
    }
    if (value > kMaxCodePoint || (value >= kSurrogateFirst && value <= kSurrogateLast)) {
      return Error("an escape that is not a Unicode scalar value");
    }
    return static_cast<uint32_t>(value);
  }

  absl::StatusOr<int> Number() {
    int value = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = value * 10 + (text_[pos_++] - '0');
      if (value > kMaxGbnfRepeat) {
        return Error(absl::StrCat("a repeat count above ", kMaxGbnfRepeat));
      }
    }
    return pos_ == start ? -1 : value;
  }

  // Applies the repeat at pos_ to out[unit_start..]: the unit becomes one element (a rule of its
  // own when it is several, such as a literal), then copies of it and rules for the optional
  // rest. `x*` is `s ::= x s | ""` (right recursion, so the matcher's stacks stay flat).
  absl::Status Repeat(int32_t rule, size_t unit_start, Elements* out) {
    int min = 0, max = -1;  // max -1: unbounded
    const char op = text_[pos_++];
    if (op == '+') {
      min = 1;
    } else if (op == '?') {
      max = 1;
    } else if (op == '{') {
      Skip();
      absl::StatusOr<int> low = Number();
      if (!low.ok()) return low.status();
      Skip();
      int high = *low;
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        Skip();
        absl::StatusOr<int> h = Number();
        if (!h.ok()) return h.status();
        high = *h;
        Skip();
      } else if (*low < 0) {
        return Error("expected a count in '{...}'");
      }
      if (pos_ >= text_.size() || text_[pos_] != '}') return Error("expected '}'");
      ++pos_;
      min = std::max(*low, 0);
      max = high;
      if (max >= 0 && max < min) return Error("a repeat whose maximum is below its minimum");
    }
    Element unit{Kind::kRule, -1};
    if (out->size() - unit_start == 1) {
      unit = (*out)[unit_start];
    } else {
      unit.index = Generated(rule, {Elements(out->begin() + unit_start, out->end())});
    }
    out->resize(unit_start);
    if (absl::Status s = Count(static_cast<size_t>(min) + 3); !s.ok()) return s;
    out->insert(out->end(), min, unit);
    if (max < 0) {
      const int32_t star = Generated(rule, {Elements{unit}, Elements{}});
      bodies_[star][0].push_back({Kind::kRule, star});
      out->push_back({Kind::kRule, star});
    } else if (max > min) {
      if (absl::Status s = Count(2 * static_cast<size_t>(max - min)); !s.ok()) return s;
      int32_t optional = Generated(rule, {Elements{unit}, Elements{}});
      for (int k = min + 1; k < max; ++k) {
        optional = Generated(rule, {Elements{unit, Element{Kind::kRule, optional}}, Elements{}});
      }
      out->push_back({Kind::kRule, optional});
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
  size_t elements_ = 0;
  absl::flat_hash_map<std::string, int32_t> by_name_;
  // Per rule, by index:
  std::vector<std::string> names_;
  std::vector<std::vector<Elements>> bodies_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::vector<CodePointClass> classes_;
};

// Rules that can match "" (`nullable`) and rules that can match some finite text (`finite`):
// least fixpoints by worklist, linear in the grammar (a pass per rule settled would be
// quadratic on a long chain of rules).
void Fixpoints(const Grammar& g, std::vector<bool>* nullable, std::vector<bool>* finite) {
  nullable->assign(g.rules.size(), false);
  finite->assign(g.rules.size(), false);
  // Per alternative: its rule, and the references not yet known nullable / finite (a class makes
  // it never nullable). Per rule: the alternatives referencing it, once per reference.
  std::vector<int32_t> owner, unknown_nullable, unknown_finite;
  std::vector<std::vector<int32_t>> users(g.rules.size());
  std::vector<std::pair<int32_t, bool>> settled;  // (rule, nullable: else finite)
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (int32_t start : g.rules[r].alternatives) {
      const int32_t alt = static_cast<int32_t>(owner.size());
      int32_t refs = 0;
      bool has_class = false;
      for (int32_t p = start; g.elements[p].kind != Kind::kEnd; ++p) {
        if (g.elements[p].kind == Kind::kClass) {
          has_class = true;
        } else {
          ++refs;
          users[g.elements[p].index].push_back(alt);
        }
      }
      owner.push_back(static_cast<int32_t>(r));
      unknown_nullable.push_back(has_class ? -1 : refs);
      unknown_finite.push_back(refs);
      if (refs == 0) {
        if (!has_class) settled.push_back({static_cast<int32_t>(r), true});
        settled.push_back({static_cast<int32_t>(r), false});
      }
    }
  }
  while (!settled.empty()) {
    const auto [rule, is_nullable] = settled.back();
    settled.pop_back();
    std::vector<bool>& known = is_nullable ? *nullable : *finite;
    if (known[rule]) continue;
    known[rule] = true;
    std::vector<int32_t>& unknown = is_nullable ? unknown_nullable : unknown_finite;
    for (int32_t alt : users[rule]) {
      if (unknown[alt] > 0 && --unknown[alt] == 0) settled.push_back({owner[alt], is_nullable});
    }
  }
}

// The rules a rule can start with: the references reached before a character must be read.
std::vector<std::vector<int32_t>> LeftEdges(const Grammar& g, const std::vector<bool>& nullable) {
  std::vector<std::vector<int32_t>> edges(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (int32_t start : g.rules[r].alternatives) {
      for (int32_t p = start; g.elements[p].kind == Kind::kRule; ++p) {
        edges[r].push_back(g.elements[p].index);
        if (!nullable[g.elements[p].index]) break;
      }
    }
  }
  return edges;
}

// A rule on a cycle of `edges`, or -1. Iterative depth-first search: generated rules can chain
// thousands deep.
int32_t OnCycle(const std::vector<std::vector<int32_t>>& edges) {
  enum : uint8_t { kNew, kOpen, kDone };
  std::vector<uint8_t> color(edges.size(), kNew);
  for (size_t root = 0; root < edges.size(); ++root) {
    if (color[root] != kNew) continue;
    std::vector<std::pair<int32_t, size_t>> stack = {{static_cast<int32_t>(root), 0}};
    color[root] = kOpen;
    while (!stack.empty()) {
      auto& [rule, next] = stack.back();
      if (next == edges[rule].size()) {
        color[rule] = kDone;
        stack.pop_back();
        continue;
      }
      const int32_t to = edges[rule][next++];
      if (color[to] == kOpen) return to;
      if (color[to] == kNew) {
        color[to] = kOpen;
        stack.push_back({to, 0});
      }
    }
  }
  return -1;
}

}  // namespace

absl::StatusOr<Grammar> CompileGbnf(absl::string_view text) {
  if (text.size() > kMaxGbnfBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: longer than ", kMaxGbnfBytes, " bytes"));
  }
  if (const size_t bad = FindInvalidUtf8(text); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("grammar at byte ", bad, ": not UTF-8"));
  }
  absl::StatusOr<Grammar> g = Parser(text).Parse();
  if (!g.ok()) return g;
  std::vector<bool> nullable, finite;
  Fixpoints(*g, &nullable, &finite);
  if (const int32_t r = OnCycle(LeftEdges(*g, nullable)); r >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar: rule '", g->rules[r].name,
        "' is left-recursive: it can reach itself before reading a character (a repeat of "
        "something that can be empty does too); write it with a repeat instead, as "
        "'list ::= item (\",\" item)*'"));
  }
  // Every rule the output can enter must be able to finish, or the output could never end.
  std::vector<bool> reached(g->rules.size(), false);
  std::vector<int32_t> todo = {g->root};
  reached[g->root] = true;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    if (!finite[r]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grammar: rule '", g->rules[r].name,
          "' can never finish: each of its alternatives needs it (or a rule that needs it) "
          "again"));
    }
    for (int32_t start : g->rules[r].alternatives) {
      for (int32_t p = start; g->elements[p].kind != Kind::kEnd; ++p) {
        const Element& e = g->elements[p];
        if (e.kind == Kind::kRule && !reached[e.index]) {
          reached[e.index] = true;
          todo.push_back(e.index);
        }
      }
    }
  }
  return g;
}

}  // namespace blossom
