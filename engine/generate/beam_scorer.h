// Beam search's bookkeeping, step by step, exactly as Hugging Face transformers' BeamSearchScorer
// (generate(num_beams=k, do_sample=False)): which beams live on, which finish, when the search
// is over and which finished sequences it returns. No model here: each step is given the most
// likely next tokens of every running beam (raw log-softmax, as the engine's logprobs), so the
// scorer is tested on hand-made numbers and the driver (engine/serving/beam_search) feeds it
// from the engine.
//
// The rules (transformers 4.45, BeamSearchScorer.process / BeamHypotheses):
// - a candidate's score is its beam's running score plus the token's log-probability, summed in
//   fp32 as HF does; the first step has one beam (HF's other beams start at -1e9);
// - candidates are ranked over all beams; of the best CandidatesPerBeam() of them, an end token
//   among the first k (k = beam_width) finishes that beam, with the score divided by
//   generated_length ** length_penalty (the end token counted); the first k others run on;
// - before min_new_tokens, end tokens are not candidates (HF masks them to -inf);
// - early stopping: kWhenFull ends once k sequences finished; kHeuristic (HF's False) also
//   needs the best candidate's score at the current length to be no better than the worst
//   finished one; kNever (HF's "never") compares with the best score at the longest length
//   (when length_penalty > 0);
// - at max_new_tokens the running beams join the finished ones (unless the search was already
//   over); the best num_return_sequences are returned, best first (ties: the later one first,
//   as Python's sorted + pop).
// Candidates of equal score rank by beam, then token (torch.topk leaves such ties in no fixed
// order, so HF may differ there). Width 1 follows the same rules (HF refuses num_beams=1 and
// decodes greedily instead; the two differ only with kNever, where a width-1 search may run on
// past an end token that ranked first).
//
// Not thread-safe; one search per object.
#ifndef BLOSSOM_ENGINE_GENERATE_BEAM_SCORER_H_
#define BLOSSOM_ENGINE_GENERATE_BEAM_SCORER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/sampling/sampler.h"

namespace blossom {

// Most beams of one search. Each beam asks the engine for its top candidates as logprobs,
// which are capped at kMaxLogprobs; the beam width is bounded by that as well (Validate).
inline constexpr int32_t kMaxBeamWidth = 10;
// |length_penalty| at most this: 2048 ** 10 is still a finite double, 2048 ** 100 is not.
inline constexpr double kMaxLengthPenalty = 10.0;

enum class EarlyStopping { kHeuristic, kWhenFull, kNever };

struct BeamSearchParams {
  int32_t beam_width = 4;
  int32_t num_return_sequences = 1;  // <= beam_width
  // Finished scores are sum(logprobs) / generated_length ** length_penalty (double, as Python).
  // Within [-kMaxLengthPenalty, kMaxLengthPenalty]: beyond, length ** penalty overflows.
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::kHeuristic;
  int32_t max_new_tokens = 16;
  int32_t min_new_tokens = 0;
  // Tokens that finish a beam (EOS unless ignored, and stop token ids); may be empty.
  std::vector<int32_t> end_tokens;
};

// OK, or InvalidArgument naming the field: beam_width in [1, kMaxBeamWidth] and
// beam_width * max(2, 1 + end tokens) <= kMaxLogprobs (the candidates each beam needs),
// num_return_sequences in [1, beam_width], |length_penalty| <= kMaxLengthPenalty, max_new_tokens >= 1,
// min_new_tokens in [0, max_new_tokens], end tokens distinct and in [0, vocab_size).
absl::Status Validate(const BeamSearchParams& params, int32_t vocab_size);

// The candidates a step ranks, each beam's most likely tokens counted:
// max(2, 1 + end tokens) * beam_width (HF's n_tokens_to_keep).
int32_t CandidatesPerStep(const BeamSearchParams& params);

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // the new tokens; a finishing end token included
  std::vector<float> logprobs;  // each token's raw log-probability
  float cumulative_logprob = 0.0f;  // their fp32 sum, as HF's beam score
  // cumulative_logprob / tokens.size() ** length_penalty, in double (HF's sequences_scores
  // holds the same value rounded to float32).
  double score = 0.0;
  bool ended_by_end_token = false;
};

class BeamScorer {
 public:
  // `params` must have passed Validate.
  explicit BeamScorer(BeamSearchParams params);

  // The beams whose next-token distribution the next Step needs, in order (one before the
  // first step). Their tokens are the new tokens so far; `cumulative_logprob` is the running
  // score. Empty once done().
  const std::vector<BeamHypothesis>& running() const { return running_; }
  // How many of each running beam's most likely next tokens Step needs (CandidatesPerStep).
  int32_t CandidatesPerBeam() const;
  // One step: candidates[i] are running()[i]'s most likely next tokens with their raw
  // log-softmax, at least CandidatesPerBeam() of them unless the vocabulary is smaller (any
  // order; ranked here). InvalidArgument when the sizes do not fit or too few tokens can
  // continue a beam; FailedPrecondition once done().
  absl::Status Step(absl::Span<const std::vector<TokenLogprob>> candidates);
  bool done() const { return done_; }
  // The best num_return_sequences finished sequences, best first. Only once done().
  std::vector<BeamHypothesis> Finalize() const;

 private:
  // HF's BeamHypotheses.add: keeps the beam_width best, in insertion order.
  void AddFinished(BeamHypothesis hypothesis);
  // HF's BeamHypotheses.is_done for the best candidate score of this step.
  bool SearchIsOver(float best_candidate_score, int32_t generated_length) const;
  bool IsEndToken(int32_t token) const;

  BeamSearchParams params_;
  std::vector<BeamHypothesis> running_;
  std::vector<BeamHypothesis> finished_;
  double worst_finished_score_ = 1e9;  // HF's worst_score
  bool done_ = false;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GENERATE_BEAM_SCORER_H_
