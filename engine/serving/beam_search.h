// Beam search served by the engine, as vLLM V1 serves it: each step of the search is one round
// of ordinary engine requests, one per running beam (its prompt: the request's prompt and the
// beam's tokens; one greedy token with the top candidates' logprobs), and a BeamScorer
// (engine/generate) turns a round's candidates into the next round's beams, with Hugging Face's
// rules. The prefix cache keeps each beam's full KV blocks between rounds, so a round computes
// only the tokens after a beam's last full block (at most block_size of them); with prefix
// caching off every round recomputes each beam's whole context. A round's requests run in the
// same engine steps as everyone else's (continuous batching), so a search never holds the
// engine, and its KV blocks return to the pool (as evictable cache) between rounds.
// Admission (Start) asks the waiting queue for room for the widest round, and later rounds are
// queued past the waiting bounds (EngineRequest::bypass_waiting_limits), so an admitted search
// is never refused midway; searches admitted together may take the queue past its bounds by
// their rounds (at most beam_width requests each).
//
// Thread-safety: Start and Cancel may be called from any thread. `done` runs once: on the
// engine's delivery thread when the search ends by itself, or on the thread whose Cancel (or
// the engine's Shutdown) delivered the last round's final event. Invariant (under mutex_): a
// round's requests are all submitted before its events are counted as complete, and `done`
// is called only when no request of the search is left in the engine.
#ifndef BLOSSOM_ENGINE_SERVING_BEAM_SEARCH_H_
#define BLOSSOM_ENGINE_SERVING_BEAM_SEARCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/generate/beam_scorer.h"
#include "engine/serving/engine.h"

namespace blossom {

struct BeamSearchRequest {
  std::vector<int32_t> prompt_tokens;
  BeamSearchParams params;
  int32_t priority = 0;  // of every round's requests
};

struct BeamSearchOutcome {
  // OK; Cancelled after Cancel; otherwise why a round failed (the engine's status).
  absl::Status status;
  std::vector<BeamHypothesis> beams;  // when OK: the best num_return_sequences, best first
  int32_t prompt_tokens = 0;
  int32_t rounds = 0;
  // Tokens the rounds' requests computed (their prompts less prefix-cache hits) and found in
  // the prefix cache: what the search cost the engine.
  int64_t computed_tokens = 0, cached_tokens = 0;
  // The first round's prefix-cache hits: the prompt's (Usage::cached_prompt_tokens).
  int32_t cached_prompt_tokens = 0;
  Clock::time_point arrival{}, finished{};
};

class BeamSearch : public std::enable_shared_from_this<BeamSearch> {
 public:
  using Done = std::function<void(BeamSearchOutcome)>;

  // Validates the request (InvalidArgument naming the field), submits the first round and
  // returns; a refusal of the first round is returned here (and `done` is never called).
  // `engine` must outlive the search.
  static absl::StatusOr<std::shared_ptr<BeamSearch>> Start(Engine* engine,
                                                           BeamSearchRequest request, Done done);

  // Whether a search's widest round (`beam_width` requests of the prompt plus max_new_tokens)
  // could ever fit the waiting queue `limits` describes: InvalidArgument naming the bound it
  // exceeds otherwise (such a search is refused for good). Start checks it; the server asks
  // first, to attribute the refusal to beam_width.
  static absl::Status CheckQueueCanHold(const SchedulerConfig& limits, int64_t beam_width,
                                        int64_t prompt_tokens, int64_t max_new_tokens);

  // Ends the search: its requests in the engine are cancelled and `done` gets Cancelled (unless
  // the search has ended already). Any thread; returns before `done` may have run.
  void Cancel();

 private:
  BeamSearch(Engine* engine, BeamSearchRequest request, Done done);
  // Submits one request per running beam. On a refusal, returns it (nothing of the round is
  // left in the engine then: the ones already submitted are cancelled). Without mutex_.
  absl::Status SubmitRound();
  void OnEvent(int32_t round, size_t beam, const EngineEvent& event);
  // After a round's last final event: the next round, or the end. Without mutex_.
  void Advance();
  void Finish(absl::Status status);
  // The round's requests submitted and not yet ended. Requires mutex_.
  std::vector<uint64_t> InEngineLocked() const;

  Engine* const engine_;
  const BeamSearchRequest request_;
  Done done_;

  std::mutex mutex_;
  BeamScorer scorer_;                         // guarded by mutex_
  int32_t round_ = 0;                         // guarded by mutex_
  // This round, per beam (guarded by mutex_): the engine's request id (0 until submitted) and
  // whether its final event came.
  std::vector<uint64_t> ids_;
  std::vector<bool> received_;
  size_t unfinished_ = 0;                     // guarded by mutex_: this round's final events to come
  std::vector<std::vector<TokenLogprob>> candidates_;  // guarded by mutex_: per beam, this round
  absl::Status round_status_;                 // guarded by mutex_: the first failure of the round
  bool cancelled_ = false;                    // guarded by mutex_
  bool submitting_ = false;                   // guarded by mutex_: SubmitRound in progress
  // Guarded by mutex_: the first round was refused, so Start returns the refusal and `done`
  // must never run (the events of the cancelled requests of that round end nothing).
  bool start_refused_ = false;
  BeamSearchOutcome outcome_;                 // guarded by mutex_
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SERVING_BEAM_SEARCH_H_
