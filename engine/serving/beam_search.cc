#include "engine/serving/beam_search.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace blossom {

BeamSearch::BeamSearch(Engine* engine, BeamSearchRequest request, Done done)
    : engine_(engine),
      request_(std::move(request)),
      done_(std::move(done)),
      scorer_(request_.params) {
  outcome_.prompt_tokens = static_cast<int32_t>(request_.prompt_tokens.size());
  outcome_.arrival = Clock::now();
}

absl::StatusOr<std::shared_ptr<BeamSearch>> BeamSearch::Start(Engine* engine,
                                                              BeamSearchRequest request,
                                                              Done done) {
  if (request.prompt_tokens.empty()) {
    return absl::InvalidArgumentError("prompt_tokens must not be empty");
  }
  absl::Status valid = Validate(request.params, engine->vocab_size());
  if (!valid.ok()) return valid;
  // Each round asks for one token, so the engine checks only that round's length: the whole
  // search's (the longest beam's last round) is checked here, with the engine's words.
  absl::Status fits = engine->CheckFits(static_cast<int64_t>(request.prompt_tokens.size()),
                                        request.params.max_new_tokens);
  if (!fits.ok()) return fits;
  // Admission: the queue must have room now for the search's widest round (beam_width
  // requests of up to the whole length), which later rounds then take without asking (they
  // pass the waiting bounds, so that an admitted search is never refused midway). A search
  // whose round could never fit the queue is refused for good.
  const int64_t width = request.params.beam_width;
  const int64_t prompt = static_cast<int64_t>(request.prompt_tokens.size());
  absl::Status can_hold = CheckQueueCanHold(engine->scheduler_config(), width, prompt,
                                            request.params.max_new_tokens);
  if (!can_hold.ok()) return can_hold;
  absl::Status room =
      engine->CheckWaitingRoom(width, width * (prompt + request.params.max_new_tokens));
  if (!room.ok()) return room;
  std::shared_ptr<BeamSearch> search(
      new BeamSearch(engine, std::move(request), std::move(done)));
  absl::Status submitted = search->SubmitRound();
  if (!submitted.ok()) return submitted;
  return search;
}

absl::Status BeamSearch::CheckQueueCanHold(const SchedulerConfig& limits, int64_t beam_width,
                                           int64_t prompt_tokens, int64_t max_new_tokens) {
  if (beam_width > limits.max_waiting_requests) {
    return absl::InvalidArgumentError(
        absl::StrCat("beam_width must be at most the server's --max_waiting_requests (",
                     limits.max_waiting_requests, "), got ", beam_width));
  }
  const int64_t round_tokens = beam_width * (prompt_tokens + max_new_tokens);
  if (round_tokens > limits.max_waiting_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "beam_width (", beam_width, ") times the prompt and max_new_tokens is ", round_tokens,
        " tokens, more than the server's waiting queue holds (", limits.max_waiting_prompt_tokens,
        ")"));
  }
  return absl::OkStatus();
}

void BeamSearch::Cancel() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    ids = InEngineLocked();
  }
  // Each delivers its final event, which may end the search (and call done_) on this thread.
  for (uint64_t id : ids) engine_->Cancel(id);
}

absl::Status BeamSearch::SubmitRound() {
  std::vector<std::vector<int32_t>> prompts;
  int32_t round = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    round = round_;
    for (const BeamHypothesis& beam : scorer_.running()) {
      std::vector<int32_t> prompt = request_.prompt_tokens;
      prompt.insert(prompt.end(), beam.tokens.begin(), beam.tokens.end());
      prompts.push_back(std::move(prompt));
    }
    ids_.assign(prompts.size(), 0);
    received_.assign(prompts.size(), false);
    candidates_.assign(prompts.size(), {});
    unfinished_ = prompts.size();
    round_status_ = absl::OkStatus();
    submitting_ = true;
  }
  absl::Status refused;
  size_t submitted = 0;
  for (; submitted < prompts.size(); ++submitted) {
    EngineRequest r;
    r.prompt_tokens = std::move(prompts[submitted]);
    r.priority = request_.priority;
    r.beam_round = true;
    // The search was admitted with its first round: later rounds are never refused for a full
    // queue (the search would be lost midway).
    r.bypass_waiting_limits = round > 0;
    r.sampling.temperature = 0.0f;
    r.sampling.logprobs = scorer_.CandidatesPerBeam();
    r.stopping.max_new_tokens = 1;
    r.stopping.ignore_eos = true;  // an end token is a candidate like any other
    std::shared_ptr<BeamSearch> self = shared_from_this();
    const size_t beam = submitted;
    auto stream = engine_->Submit(std::move(r), [self, round, beam](const EngineEvent& event) {
      self->OnEvent(round, beam, event);
    });
    if (!stream.ok()) {
      refused = stream.status();
      break;
    }
    bool cancel_now = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ids_[beam] = (*stream)->id();
      cancel_now = cancelled_ && !received_[beam];
    }
    if (cancel_now) engine_->Cancel((*stream)->id());
  }
  std::vector<uint64_t> to_cancel;
  bool finish_now = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submitting_ = false;
    if (!refused.ok()) {
      // The beams never submitted will send no event; those in the engine are cancelled.
      unfinished_ -= prompts.size() - submitted;
      if (round_status_.ok()) round_status_ = refused;
      to_cancel = InEngineLocked();
      start_refused_ = round == 0;
      finish_now = unfinished_ == 0 && !start_refused_;
    } else {
      finish_now = unfinished_ == 0;  // every event came while submitting
    }
  }
  for (uint64_t id : to_cancel) engine_->Cancel(id);
  if (round == 0 && !refused.ok()) return refused;  // Start returns it; done_ is not called
  if (finish_now) Advance();
  return absl::OkStatus();
}

std::vector<uint64_t> BeamSearch::InEngineLocked() const {
  std::vector<uint64_t> ids;
  for (size_t beam = 0; beam < ids_.size(); ++beam) {
    if (ids_[beam] != 0 && !received_[beam]) ids.push_back(ids_[beam]);
  }
  return ids;
}

void BeamSearch::OnEvent(int32_t round, size_t beam, const EngineEvent& event) {
  if (!event.finished) return;  // one token: its event is the final one
  bool round_over = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (round != round_) return;
    received_[beam] = true;
    outcome_.computed_tokens += event.usage.prompt_tokens - event.usage.cached_prompt_tokens;
    outcome_.cached_tokens += event.usage.cached_prompt_tokens;
    if (round == 0) outcome_.cached_prompt_tokens = event.usage.cached_prompt_tokens;
    if (event.has_token && event.status.ok() && event.finish_reason != FinishReason::kCancelled &&
        event.finish_reason != FinishReason::kError) {
      candidates_[beam] = event.token.top_logprobs;
      if (candidates_[beam].empty()) {
        // Can only happen when the vocabulary is smaller than the logprobs asked for... or
        // never: the chosen token alone still lets the scorer refuse cleanly.
        candidates_[beam].push_back({event.token.token, event.token.logprob});
      }
    } else if (round_status_.ok()) {
      round_status_ = !event.status.ok() ? event.status
                                         : absl::CancelledError("a round of the beam search "
                                                                "was cancelled by the engine");
    }
    round_over = --unfinished_ == 0 && !submitting_ && !start_refused_;
  }
  if (round_over) Advance();
}

void BeamSearch::Advance() {
  absl::Status status;
  bool next_round = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outcome_.rounds = round_ + 1;
    if (cancelled_) {
      status = absl::CancelledError("the beam search was cancelled");
    } else if (!round_status_.ok()) {
      status = round_status_;
    } else {
      status = scorer_.Step(candidates_);
      if (status.ok()) {
        if (scorer_.done()) {
          outcome_.beams = scorer_.Finalize();
        } else {
          ++round_;
          next_round = true;
        }
      } else {
        status = absl::InternalError(absl::StrCat("beam search step: ", status.message()));
      }
    }
  }
  if (!next_round) {
    Finish(status);
    return;
  }
  absl::Status submitted = SubmitRound();
  (void)submitted;  // after round 0, a refusal ends the search through Advance
}

void BeamSearch::Finish(absl::Status status) {
  BeamSearchOutcome outcome;
  Done done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) return;
    outcome = std::move(outcome_);
    outcome.status = std::move(status);
    outcome.finished = Clock::now();
    if (!outcome.status.ok()) outcome.beams.clear();
    done = std::move(done_);
    done_ = nullptr;
  }
  done(std::move(outcome));
}

}  // namespace blossom
