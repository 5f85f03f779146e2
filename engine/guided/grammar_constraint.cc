#include "engine/guided/grammar_constraint.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/guided/grammar_matcher.h"

namespace blossom {

absl::StatusOr<std::shared_ptr<const GrammarConstraint>> GrammarConstraint::Create(
    absl::string_view gbnf, std::shared_ptr<const TokenVocabulary> vocabulary) {
  absl::StatusOr<Grammar> grammar = CompileGbnf(gbnf);
  if (!grammar.ok()) return grammar.status();
  GrammarMatcher matcher(&*grammar);
  if (matcher.Start().stacks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar: its start is too ambiguous or too deep (more than ", kMaxGrammarStacks,
        " parse stacks, or ", kMaxGrammarStackDepth, " rules deep)"));
  }
  return std::shared_ptr<const GrammarConstraint>(
      new GrammarConstraint(*std::move(grammar), std::move(vocabulary)));
}

GrammarConstraint::GrammarConstraint(Grammar grammar,
                                     std::shared_ptr<const TokenVocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {}

absl::StatusOr<std::shared_ptr<const TokenBitmask>> GrammarConstraint::AllowedTokens(
    absl::Span<const int32_t> output, int32_t end_token) const {
  std::unique_ptr<Resume::Entry> entry = resume_.Take(output);
  if (entry == nullptr) {
    entry = std::make_unique<Resume::Entry>(GrammarMatcher(&grammar_));
    entry->checkpoints.push_back({0, entry->reader.Start()});
  }
  GrammarMatcher& matcher = entry->reader;
  // The bounds are on what this call does: a resumed matcher has done (and built) more before.
  const size_t work_at_start = matcher.work_done(), links_at_start = matcher.links();
  auto over = [&](size_t work_budget) {
    return matcher.work_done() > work_budget || matcher.links() - links_at_start > kMaxGrammarLinks;
  };
  auto too_costly = [&](absl::string_view doing) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar: ", doing, " after ", output.size(), " output tokens takes more than ",
        kMaxGrammarCallWork, " steps of work or ", kMaxGrammarLinks,
        " stack links; make the grammar less ambiguous"));
  };
  GrammarMatcher::State state = entry->checkpoints.back().state;
  for (size_t i = entry->read.size(); i < output.size(); ++i) {
    const absl::string_view bytes = vocabulary_->bytes(output[i]);
    if (bytes.empty() || !matcher.AdvanceAll(state, bytes)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output token ", i, " (id ", output[i], ") breaks the request's grammar"));
    }
    if (over(work_at_start + kMaxGrammarCallWork)) return too_costly("reading the output");
    resume_.Advance(*entry, output[i], state);
  }
  std::string key(reinterpret_cast<const char*>(&end_token), sizeof(end_token));
  // A deep state's key is long: such a mask is computed, not cached (bounding the cache).
  const bool cacheable = matcher.AppendKey(state, &key, kMaxGrammarKeyBytes);
  std::shared_ptr<const TokenBitmask> mask = cacheable ? masks_.Find(key) : nullptr;
  if (mask == nullptr) {
    // A walk past its budget is refused whole (and not cached): it stops costing at once.
    bool over_budget = false;
    const size_t budget = matcher.work_done() + kMaxGrammarCallWork;
    mask = WalkVocabulary(*vocabulary_, state, matcher.CanEnd(state), end_token,
                          [&](const GrammarMatcher::State& from, uint8_t byte,
                              GrammarMatcher::State* to) {
                            over_budget = over_budget || over(budget);
                            return !over_budget && matcher.Advance(from, byte, to);
                          });
    if (over_budget) return too_costly("finding the allowed tokens");
    if (cacheable) masks_.Insert(std::move(key), mask);
  }
  // Kept for the request's next call unless its arena has grown large (a walk of an ambiguous
  // grammar's state can build many links): that one is dropped and the next call reads again.
  if (matcher.links() <= kMaxResumedGrammarLinks) resume_.Put(std::move(entry));
  // Every state the grammar reaches can go on unless a bound cut it, so nothing allowed means
  // each next character passed the matcher's bounds: the request's fault, said as such rather
  // than as a masked row.
  if (std::all_of(mask->begin(), mask->end(), [](uint64_t word) { return word == 0; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar: after ", output.size(), " output tokens every next character needs more than ",
        kMaxGrammarStacks, " parse stacks or ", kMaxGrammarStackDepth,
        " rules of nesting; make the grammar less ambiguous or less deep"));
  }
  return mask;
}

}  // namespace blossom
