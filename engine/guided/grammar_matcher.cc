#include "engine/guided/grammar_matcher.h"

#include <algorithm>

#include "engine/text/utf8.h"

namespace blossom {

using Kind = Grammar::Kind;

GrammarMatcher::GrammarMatcher(const Grammar* grammar) : grammar_(grammar) {
  links_.push_back(Link{-1, kBottom, 0});
}

uint32_t GrammarMatcher::Intern(int32_t pos, uint32_t parent) {
  const uint32_t depth = links_[parent].depth + 1;
  if (depth > kMaxGrammarStackDepth) return kBottom;
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
  auto [it, inserted] = interned_.try_emplace(key, static_cast<uint32_t>(links_.size()));
  if (inserted) links_.push_back(Link{pos, parent, depth});
  return it->second;
}

bool GrammarMatcher::Expand(int32_t pos, uint32_t parent, std::vector<uint32_t>* out,
                            size_t* work) {
  const std::vector<Grammar::Element>& elements = grammar_->elements;
  todo_.clear();
  visited_.clear();
  todo_.push_back({pos, parent});
  while (!todo_.empty()) {
    auto [p, under] = todo_.back();
    todo_.pop_back();
    // The same pair leads to the same stacks: once is enough (empty alternatives reach a pair
    // by exponentially many paths).
    if (!visited_.insert((static_cast<uint64_t>(p) << 32) | under).second) continue;
    ++work_done_;
    if (++*work > kMaxGrammarStepWork) return false;
    if (elements[p].kind == Kind::kEnd) {
      // The rule is done: go on where the rule below entered it (never at an end: such a
      // position is not kept, see below).
      if (under == kBottom) {
        out->push_back(kBottom);
        continue;
      }
      p = links_[under].pos;
      under = links_[under].parent;
    }
    if (elements[p].kind == Kind::kClass) {
      const uint32_t top = Intern(p, under);
      if (top != kBottom) out->push_back(top);
      continue;
    }
    // A rule: read one of its alternatives, then go on after it. Nothing is kept for a rule
    // that ends its alternative (`x ::= "a" x` stays one link deep however long it repeats).
    uint32_t after = under;
    if (elements[p + 1].kind != Kind::kEnd) {
      after = Intern(p + 1, under);
      if (after == kBottom) continue;
    }
    for (int32_t start : grammar_->rules[elements[p].index].alternatives) {
      todo_.push_back({start, after});
    }
  }
  return true;
}

GrammarMatcher::State GrammarMatcher::Start() {
  State s;
  size_t work = 0;
  bool ok = true;
  for (int32_t start : grammar_->rules[grammar_->root].alternatives) {
    ok = ok && Expand(start, kBottom, &s.stacks, &work);
  }
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
  if (!ok || s.stacks.size() > kMaxGrammarStacks) s.stacks.clear();
  return s;
}

const CodePointClass& GrammarMatcher::TopClass(uint32_t stack) const {
  return grammar_->classes[grammar_->elements[links_[stack].pos].index];
}

const GrammarMatcher::Expansion& GrammarMatcher::ExpansionOf(uint32_t stack) {
  if (stack < expansion_of_.size() && expansion_of_[stack] >= 0) {
    return expansions_[expansion_of_[stack]];
  }
  scratch_.clear();
  size_t work = 0;
  Expansion e;
  e.ok = Expand(links_[stack].pos + 1, links_[stack].parent, &scratch_, &work);
  e.work = static_cast<uint32_t>(work);
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  e.begin = static_cast<uint32_t>(expanded_.size());
  expanded_.insert(expanded_.end(), scratch_.begin(), scratch_.end());
  e.end = static_cast<uint32_t>(expanded_.size());
  // Expanding interned new links: the index grows to cover them.
  if (expansion_of_.size() < links_.size()) expansion_of_.resize(links_.size(), -1);
  expansion_of_[stack] = static_cast<int32_t>(expansions_.size());
  expansions_.push_back(e);
  return expansions_.back();
}

bool GrammarMatcher::Step(const State& state, uint32_t code_point, State* next) {
  next->stacks.clear();
  size_t work = 0;
  for (uint32_t stack : state.stacks) {
    ++work_done_;
    if (stack == kBottom || !ClassContains(TopClass(stack), code_point)) continue;
    const Expansion& e = ExpansionOf(stack);
    work += e.work;
    if (!e.ok || work > kMaxGrammarStepWork) return false;
    next->stacks.insert(next->stacks.end(), expanded_.begin() + e.begin, expanded_.begin() + e.end);
  }
  std::sort(next->stacks.begin(), next->stacks.end());
  next->stacks.erase(std::unique(next->stacks.begin(), next->stacks.end()), next->stacks.end());
  return !next->stacks.empty() && next->stacks.size() <= kMaxGrammarStacks;
}

bool GrammarMatcher::Advance(const State& state, uint8_t c, State* next) {
  next->utf8 = state.utf8;
  uint32_t code_point = 0;
  switch (next->utf8.Feed(c, &code_point)) {
    case Utf8Partial::Read::kInvalid:
      return false;
    case Utf8Partial::Read::kWhole:
      return Step(state, code_point, next);
    case Utf8Partial::Read::kPartial:
      break;
  }
  // Partly read: some character it can become must be one a stack reads next.
  next->stacks = state.stacks;
  for (uint32_t stack : next->stacks) {
    if (stack != kBottom &&
        ClassIntersects(TopClass(stack), next->utf8.First(), next->utf8.Last())) {
      return true;
    }
  }
  return false;
}

bool GrammarMatcher::AdvanceAll(State& state, absl::string_view bytes) {
  State next;
  for (char b : bytes) {
    if (!Advance(state, static_cast<uint8_t>(b), &next)) return false;
    std::swap(state, next);
  }
  return true;
}

bool GrammarMatcher::CanEnd(const State& state) const {
  return state.utf8.between_characters() && !state.stacks.empty() &&
         state.stacks.front() == kBottom;
}

bool GrammarMatcher::AppendKey(const State& state, std::string* key, size_t max_bytes) const {
  size_t bytes = 0;
  for (uint32_t stack : state.stacks) bytes += (links_[stack].depth + 1) * sizeof(int32_t);
  if (bytes > max_bytes) return false;
  std::vector<std::vector<int32_t>> paths;
  paths.reserve(state.stacks.size());
  for (uint32_t stack : state.stacks) {
    std::vector<int32_t>& path = paths.emplace_back();
    for (uint32_t s = stack; s != kBottom; s = links_[s].parent) path.push_back(links_[s].pos);
  }
  std::sort(paths.begin(), paths.end());
  for (const std::vector<int32_t>& path : paths) {
    const int32_t size = static_cast<int32_t>(path.size());
    key->append(reinterpret_cast<const char*>(&size), sizeof(size));
    key->append(reinterpret_cast<const char*>(path.data()), path.size() * sizeof(int32_t));
  }
  state.utf8.AppendKey(key);
  return true;
}

}  // namespace blossom
