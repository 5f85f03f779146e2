#include "engine/guided/regex.h"

#include <algorithm>
#include <string>

#include "engine/text/utf8.h"

namespace blossom {

RegexMatcher::State RegexMatcher::Start() const {
  State s;
  s.nfa.assign(nfa_->start.begin(), nfa_->start.end());
  return s;
}

bool RegexMatcher::ReadCodePoint(const State& state, uint32_t code_point, State* next) const {
  next->nfa.clear();
  for (int32_t s : state.nfa) {
    const RegexNfa::State& st = nfa_->states[s];
    if (st.cls >= 0 && ClassContains(nfa_->classes[st.cls], code_point)) {
      next->nfa.insert(next->nfa.end(), st.follow.begin(), st.follow.end());
    }
  }
  std::sort(next->nfa.begin(), next->nfa.end());
  next->nfa.erase(std::unique(next->nfa.begin(), next->nfa.end()), next->nfa.end());
  next->utf8 = Utf8Partial();
  return !next->nfa.empty();
}

bool RegexMatcher::Advance(const State& state, uint8_t c, State* next) const {
  Utf8Partial utf8 = state.utf8;
  uint32_t code_point = 0;
  switch (utf8.Feed(c, &code_point)) {
    case Utf8Partial::Read::kInvalid:
      return false;
    case Utf8Partial::Read::kWhole:
      return ReadCodePoint(state, code_point, next);
    case Utf8Partial::Read::kPartial:
      break;
  }
  next->nfa = state.nfa;
  next->utf8 = utf8;
  return CanStillMatch(*next);
}

bool RegexMatcher::CanStillMatch(const State& partial) const {
  // Classes hold no surrogates, so any code point of the range in a class can be completed.
  const uint32_t lo = partial.utf8.First(), hi = partial.utf8.Last();
  for (int32_t s : partial.nfa) {
    const RegexNfa::State& st = nfa_->states[s];
    if (st.cls >= 0 && ClassIntersects(nfa_->classes[st.cls], lo, hi)) return true;
  }
  return false;
}

bool RegexMatcher::AdvanceAll(State& state, absl::string_view bytes) const {
  State next;
  for (char b : bytes) {
    if (!Advance(state, static_cast<uint8_t>(b), &next)) {
      state.nfa.clear();
      return false;
    }
    std::swap(state, next);
  }
  return true;
}

bool RegexMatcher::CanEnd(const State& state) const {
  if (!state.utf8.between_characters()) return false;
  for (int32_t s : state.nfa) {
    if (nfa_->states[s].cls < 0) return true;
  }
  return false;
}

void RegexMatcher::AppendKey(const State& state, std::string* key) {
  for (int32_t s : state.nfa) key->append(reinterpret_cast<const char*>(&s), sizeof(s));
  state.utf8.AppendKey(key);
}

}  // namespace blossom
