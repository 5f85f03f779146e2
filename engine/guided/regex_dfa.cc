#include "engine/guided/regex_dfa.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/text/utf8.h"

namespace blossom {
namespace {

constexpr uint32_t kEndOfCodePoints = 0x110000;

// The pattern with its search semantics spelled out: "[\s\S]*(?:p)[\s\S]*" minus the anchored
// ends. An anchor inside a top-level alternation (^a|b) anchors one branch only, which this
// rewriting cannot express: refused.
absl::StatusOr<std::string> SearchPattern(absl::string_view pattern) {
  // "[]" and "[^]" open a class holding ']' in Python's reading, but are an empty class and
  // "any character" in ECMA-262's, which JSON Schema's pattern follows: refused, not guessed.
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      ++i;
    } else if (pattern.substr(i, 2) == "[]" || pattern.substr(i, 3) == "[^]") {
      return absl::InvalidArgumentError(
          "regex: [] and [^] read differently in ECMA-262 and Python: write \\] in the class");
    }
  }
  bool anchored_start = !pattern.empty() && pattern.front() == '^';
  bool anchored_end = false;
  if (!pattern.empty() && pattern.back() == '$') {
    size_t backslashes = 0;
    for (size_t i = pattern.size() - 1; i-- > 0 && pattern[i] == '\\';) ++backslashes;
    anchored_end = backslashes % 2 == 0;
  }
  absl::string_view body = pattern;
  if (anchored_start) body.remove_prefix(1);
  if (anchored_end) body.remove_suffix(1);
  if (anchored_start || anchored_end) {
    int depth = 0;
    bool in_class = false;
    for (size_t i = 0; i < body.size(); ++i) {
      const char c = body[i];
      if (c == '\\') {
        ++i;
      } else if (in_class) {
        in_class = c != ']';
      } else if (c == '[') {
        in_class = true;
      } else if (c == '(') {
        ++depth;
      } else if (c == ')') {
        --depth;
      } else if (c == '|' && depth == 0) {
        return absl::InvalidArgumentError(
            "regex: an anchor (^ or $) beside a top-level | is not supported; group the "
            "alternatives: ^(a|b)$");
      }
    }
  }
  return absl::StrCat(anchored_start ? "" : "[\\s\\S]*", "(?:", body, ")",
                      anchored_end ? "" : "[\\s\\S]*");
}

}  // namespace

int32_t RegexDfa::Step(int32_t state, uint32_t code_point) const {
  const size_t k =
      std::upper_bound(boundaries.begin(), boundaries.end(), code_point) - boundaries.begin() - 1;
  return next[state * boundaries.size() + k];
}

bool RegexDfa::AnyLive(int32_t state, uint32_t first, uint32_t last) const {
  for (const auto& [lo, hi] : live[state]) {
    if (hi >= first && lo <= last) return true;
  }
  return false;
}

absl::StatusOr<RegexDfa> CompileRegexDfa(absl::string_view pattern, bool search,
                                         size_t* work_left) {
  const size_t max_work =
      work_left == nullptr ? kMaxRegexDfaWork : std::min(kMaxRegexDfaWork, *work_left);
  std::string rewritten;
  if (search) {
    // Errors name offsets in the pattern as given, not in its rewriting.
    absl::StatusOr<RegexNfa> as_given = CompileRegex(pattern);
    if (!as_given.ok()) return as_given.status();
    absl::StatusOr<std::string> p = SearchPattern(pattern);
    if (!p.ok()) return p.status();
    rewritten = *std::move(p);
    pattern = rewritten;
  }
  absl::StatusOr<RegexNfa> nfa = CompileRegex(pattern);
  if (!nfa.ok()) return nfa.status();

  RegexDfa dfa;
  std::vector<uint32_t>& b = dfa.boundaries;
  b.push_back(0);
  for (const CodePointClass& cls : nfa->classes) {
    for (const auto& [lo, hi] : cls) {
      b.push_back(lo);
      b.push_back(hi + 1);
    }
  }
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  if (b.back() == kEndOfCodePoints) b.pop_back();
  const size_t classes = b.size();

  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  auto id_of = [&](std::vector<int32_t> set) -> absl::StatusOr<int32_t> {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (sets.size() >= kMaxRegexDfaStates) {
      return absl::InvalidArgumentError(
          absl::StrCat("regex: more than ", kMaxRegexDfaStates, " DFA states"));
    }
    const int32_t id = static_cast<int32_t>(sets.size());
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    return id;
  };
  absl::StatusOr<int32_t> start = id_of(nfa->start);
  if (!start.ok()) return start.status();
  dfa.start = *start;
  size_t work = 0;
  const absl::Status too_complex = absl::InvalidArgumentError(
      max_work < kMaxRegexDfaWork
          ? "regex: too complex to compile beside the other patterns (together, their DFAs "
            "would take too long to build)"
          : "regex: too complex to compile (its DFA would be too large)");
  for (size_t s = 0; s < sets.size(); ++s) {
    if ((s + 1) * classes > kMaxRegexDfaEntries) return too_complex;
    dfa.next.resize((s + 1) * classes, -1);
    bool accepting = false;
    for (int32_t n : sets[s]) accepting |= nfa->states[n].cls < 0;
    dfa.accepting.push_back(accepting);
    CodePointClass live;
    for (size_t k = 0; k < classes; ++k) {
      std::vector<int32_t> target;
      work += sets[s].size();
      for (int32_t n : sets[s]) {
        const RegexNfa::State& st = nfa->states[n];
        if (st.cls >= 0 && ClassContains(nfa->classes[st.cls], b[k])) {
          target.insert(target.end(), st.follow.begin(), st.follow.end());
        }
      }
      work += target.size();
      if (work > max_work) return too_complex;
      if (target.empty()) continue;
      std::sort(target.begin(), target.end());
      target.erase(std::unique(target.begin(), target.end()), target.end());
      absl::StatusOr<int32_t> t = id_of(std::move(target));
      if (!t.ok()) return t.status();
      dfa.next[s * classes + k] = *t;
      const uint32_t last = k + 1 < classes ? b[k + 1] - 1 : kEndOfCodePoints - 1;
      if (!live.empty() && live.back().second + 1 == b[k]) {
        live.back().second = last;
      } else {
        live.push_back({b[k], last});
      }
    }
    dfa.live.push_back(std::move(live));
  }
  if (work_left != nullptr) *work_left -= work;
  return dfa;
}

RegexDfaMatcher::State RegexDfaMatcher::Start() const {
  State s;
  s.dfa = dfa_->start;
  return s;
}

bool RegexDfaMatcher::Advance(const State& state, uint8_t c, State* next) const {
  *next = state;
  uint32_t code_point = 0;
  switch (next->utf8.Feed(c, &code_point)) {
    case Utf8Partial::Read::kInvalid:
      return false;
    case Utf8Partial::Read::kWhole:
      next->dfa = dfa_->Step(state.dfa, code_point);
      return next->dfa >= 0;
    case Utf8Partial::Read::kPartial:
      break;
  }
  // Partly read: some character it can become must have a transition.
  return dfa_->AnyLive(state.dfa, next->utf8.First(), next->utf8.Last());
}

bool RegexDfaMatcher::AdvanceAll(State& state, absl::string_view bytes) const {
  State next;
  for (char b : bytes) {
    if (!Advance(state, static_cast<uint8_t>(b), &next)) return false;
    state = next;
  }
  return true;
}

bool RegexDfaMatcher::CanEnd(const State& state) const {
  return state.utf8.between_characters() && dfa_->accepting[state.dfa];
}

void RegexDfaMatcher::AppendKey(const State& state, std::string* key) {
  key->append(reinterpret_cast<const char*>(&state.dfa), sizeof(state.dfa));
  state.utf8.AppendKey(key);
}

}  // namespace blossom
