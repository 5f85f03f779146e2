#include "engine/generate/beam_scorer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/sampling/sampling_params.h"

namespace blossom {
namespace {

absl::Status Invalid(const char* field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

// One way to continue one beam, ranked over the whole step.
struct Candidate {
  float score;  // the beam's running score plus the token's logprob (fp32, as HF)
  int32_t beam;
  int32_t token;
  float logprob;
};

}  // namespace

int32_t CandidatesPerStep(const BeamSearchParams& params) {
  const int32_t per_beam = std::max<int32_t>(2, 1 + static_cast<int32_t>(params.end_tokens.size()));
  return per_beam * params.beam_width;
}

absl::Status Validate(const BeamSearchParams& params, int32_t vocab_size) {
  if (params.beam_width < 1 || params.beam_width > kMaxBeamWidth) {
    return Invalid("beam_width", absl::StrCat("must be in [1, ", kMaxBeamWidth, "], got ",
                                              params.beam_width));
  }
  if (params.end_tokens.size() > static_cast<size_t>(kMaxLogprobs) ||
      CandidatesPerStep(params) > kMaxLogprobs) {
    return Invalid("beam_width",
                   absl::StrCat("times max(2, 1 + end tokens) must be at most ", kMaxLogprobs,
                                " (each beam weighs that many candidates), got ",
                                params.beam_width, " beams with ", params.end_tokens.size(),
                                " end tokens"));
  }
  if (params.num_return_sequences < 1 || params.num_return_sequences > params.beam_width) {
    return Invalid("num_return_sequences",
                   absl::StrCat("must be in [1, beam_width = ", params.beam_width, "], got ",
                                params.num_return_sequences));
  }
  if (!(std::abs(params.length_penalty) <= kMaxLengthPenalty)) {  // NaN fails too
    return Invalid("length_penalty", absl::StrCat("must be in [-", kMaxLengthPenalty, ", ",
                                                  kMaxLengthPenalty, "], got ",
                                                  params.length_penalty));
  }
  if (params.max_new_tokens < 1) {
    return Invalid("max_new_tokens", absl::StrCat("must be >= 1, got ", params.max_new_tokens));
  }
  if (params.min_new_tokens < 0 || params.min_new_tokens > params.max_new_tokens) {
    return Invalid("min_new_tokens", absl::StrCat("must be in [0, max_new_tokens = ",
                                                  params.max_new_tokens, "], got ",
                                                  params.min_new_tokens));
  }
  absl::flat_hash_set<int32_t> seen;
  for (int32_t token : params.end_tokens) {
    if (token < 0 || token >= vocab_size) {
      return Invalid("end_tokens", absl::StrCat("must lie in [0, ", vocab_size, "), got ", token));
    }
    if (!seen.insert(token).second) {
      return Invalid("end_tokens", absl::StrCat("must be distinct, got ", token, " twice"));
    }
  }
  if (CandidatesPerStep(params) > vocab_size) {
    return Invalid("beam_width", absl::StrCat("needs ", CandidatesPerStep(params),
                                              " candidates a step; the vocabulary has ",
                                              vocab_size));
  }
  return absl::OkStatus();
}

BeamScorer::BeamScorer(BeamSearchParams params) : params_(std::move(params)) {
  running_.emplace_back();
}

int32_t BeamScorer::CandidatesPerBeam() const { return CandidatesPerStep(params_); }

bool BeamScorer::IsEndToken(int32_t token) const {
  return std::find(params_.end_tokens.begin(), params_.end_tokens.end(), token) !=
         params_.end_tokens.end();
}

absl::Status BeamScorer::Step(absl::Span<const std::vector<TokenLogprob>> candidates) {
  if (done_) return absl::FailedPreconditionError("the beam search is over");
  if (candidates.size() != running_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("got candidates for ", candidates.size(),
                                                   " beams, ", running_.size(), " are running"));
  }
  const int32_t generated = static_cast<int32_t>(running_.front().tokens.size());
  const bool end_allowed = generated >= params_.min_new_tokens;
  std::vector<Candidate> ranked;
  for (size_t b = 0; b < candidates.size(); ++b) {
    for (const TokenLogprob& c : candidates[b]) {
      if (!end_allowed && IsEndToken(c.token)) continue;
      ranked.push_back({running_[b].cumulative_logprob + c.logprob, static_cast<int32_t>(b),
                        c.token, c.logprob});
    }
  }
  // HF's topk over the flattened [beam, token] scores: best first; ties by beam, then token.
  std::sort(ranked.begin(), ranked.end(), [](const Candidate& x, const Candidate& y) {
    if (x.score != y.score) return x.score > y.score;
    return std::make_pair(x.beam, x.token) < std::make_pair(y.beam, y.token);
  });
  if (ranked.size() > static_cast<size_t>(CandidatesPerBeam())) ranked.resize(CandidatesPerBeam());

  const int32_t width = params_.beam_width;
  std::vector<BeamHypothesis> next;
  for (size_t rank = 0; rank < ranked.size() && static_cast<int32_t>(next.size()) < width;
       ++rank) {
    const Candidate& c = ranked[rank];
    BeamHypothesis beam = running_[c.beam];
    beam.tokens.push_back(c.token);
    beam.logprobs.push_back(c.logprob);
    beam.cumulative_logprob = c.score;
    if (IsEndToken(c.token)) {
      if (static_cast<int32_t>(rank) >= width) continue;  // only the first k ranks may finish
      beam.ended_by_end_token = true;
      AddFinished(std::move(beam));
    } else {
      next.push_back(std::move(beam));
    }
  }
  if (static_cast<int32_t>(next.size()) < width) {
    return absl::InvalidArgumentError(
        absl::StrCat("only ", next.size(), " of the step's candidates continue a beam; ", width,
                     " are needed (too few candidates per beam)"));
  }
  running_ = std::move(next);
  // HF asks is_done with the best candidate of the step (finishing or not) and the length the
  // beams have now (this step's token included).
  if (!ranked.empty() && SearchIsOver(ranked.front().score, generated + 1)) {
    done_ = true;
    running_.clear();
    return absl::OkStatus();
  }
  if (generated + 1 >= params_.max_new_tokens) {
    for (BeamHypothesis& beam : running_) AddFinished(std::move(beam));
    running_.clear();
    done_ = true;
  }
  return absl::OkStatus();
}

void BeamScorer::AddFinished(BeamHypothesis hypothesis) {
  hypothesis.score = static_cast<double>(hypothesis.cumulative_logprob) /
                     std::pow(static_cast<double>(hypothesis.tokens.size()),
                              params_.length_penalty);
  const size_t width = static_cast<size_t>(params_.beam_width);
  if (finished_.size() >= width && !(hypothesis.score > worst_finished_score_)) return;
  const double score = hypothesis.score;
  finished_.push_back(std::move(hypothesis));
  if (finished_.size() > width) {
    // Drop the worst (the earliest of equals, as Python's sorted over (score, index)) and take
    // the next worst as the bar.
    std::vector<size_t> order(finished_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return finished_[x].score < finished_[y].score;
    });
    worst_finished_score_ = finished_[order[1]].score;
    finished_.erase(finished_.begin() + static_cast<std::ptrdiff_t>(order[0]));
  } else {
    worst_finished_score_ = std::min(score, worst_finished_score_);
  }
}

bool BeamScorer::SearchIsOver(float best_candidate_score, int32_t generated_length) const {
  if (finished_.size() < static_cast<size_t>(params_.beam_width)) return false;
  if (params_.early_stopping == EarlyStopping::kWhenFull) return true;
  const int32_t length = params_.early_stopping == EarlyStopping::kNever && params_.length_penalty > 0.0
                             ? params_.max_new_tokens
                             : generated_length;
  const double best_attainable = static_cast<double>(best_candidate_score) /
                                 std::pow(static_cast<double>(length), params_.length_penalty);
  return worst_finished_score_ >= best_attainable;
}

std::vector<BeamHypothesis> BeamScorer::Finalize() const {
  std::vector<size_t> order(finished_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return finished_[x].score < finished_[y].score;
  });
  std::vector<BeamHypothesis> best;
  for (size_t i = 0; i < order.size() && static_cast<int32_t>(best.size()) <
                                             params_.num_return_sequences;
       ++i) {
    best.push_back(finished_[order[order.size() - 1 - i]]);
  }
  return best;
}

}  // namespace blossom
