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
  next->pending = 0;
  next->floor = 0;
  next->code_point = 0;
  next->next_low = 0x80;
  next->next_high = 0xBF;
  return !next->nfa.empty();
}

bool RegexMatcher::Advance(const State& state, uint8_t c, State* next) const {
  if (state.pending == 0) {
    if (c < 0x80) return ReadCodePoint(state, c, next);
    Utf8Lead lead;
    if (!ReadUtf8Lead(c, &lead)) return false;
    next->nfa = state.nfa;
    next->pending = static_cast<uint8_t>(lead.continuations);
    next->floor = lead.floor;
    next->code_point = lead.bits;
    next->next_low = lead.first_low;
    next->next_high = lead.first_high;
    return CanStillMatch(*next);
  }
  if (c < state.next_low || c > state.next_high) return false;
  const uint32_t code_point = (state.code_point << 6) | (c & 0x3F);
  if (state.pending == 1) return ReadCodePoint(state, code_point, next);
  next->nfa = state.nfa;
  next->pending = state.pending - 1;
  next->floor = state.floor;
  next->code_point = code_point;
  next->next_low = 0x80;
  next->next_high = 0xBF;
  return CanStillMatch(*next);
}

bool RegexMatcher::CanStillMatch(const State& partial) const {
  // The code points the bytes so far can still become: the pending continuation bytes' bits are
  // free, and the sequence's length sets a floor (no overlong forms; the lead byte's limits on
  // the first continuation byte are exactly this floor and the ceiling of U+10FFFF). Classes hold
  // no surrogates, so any code point of the range in a class can be completed.
  const int shift = 6 * partial.pending;
  uint32_t lo = partial.code_point << shift;
  uint32_t hi = lo | ((1u << shift) - 1);
  lo = std::max(lo, partial.floor);
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return false;
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
  if (state.pending != 0) return false;
  for (int32_t s : state.nfa) {
    if (nfa_->states[s].cls < 0) return true;
  }
  return false;
}

void RegexMatcher::AppendKey(const State& state, std::string* key) {
  for (int32_t s : state.nfa) key->append(reinterpret_cast<const char*>(&s), sizeof(s));
  const uint32_t tail[] = {state.code_point, state.pending, state.next_low, state.next_high,
                           state.floor};
  key->append(reinterpret_cast<const char*>(tail), sizeof(tail));
}

}  // namespace blossom
