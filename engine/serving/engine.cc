#include "engine/serving/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/sampling/logit_edits.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/block_manager.h"
#include "engine/speculative/draft_rounds.h"
#include "kernels/status_macros.h"

namespace blossom {

// ---- RequestStream ----

void RequestStream::Push(EngineEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

bool RequestStream::Next(EngineEvent* event) {
  bool timed_out = false;
  return NextFor(event, std::chrono::milliseconds::max(), &timed_out);
}

bool RequestStream::NextFor(EngineEvent* event, std::chrono::milliseconds timeout,
                            bool* timed_out) {
  std::unique_lock<std::mutex> lock(mutex_);
  *timed_out = false;
  if (final_taken_) return false;
  auto ready = [&] { return !events_.empty(); };
  if (timeout == std::chrono::milliseconds::max()) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, timeout, ready)) {
    *timed_out = true;
    return false;
  }
  *event = std::move(events_.front());
  events_.pop_front();
  if (event->finished) final_taken_ = true;
  return true;
}

// ---- Engine ----

// Delivery of one request's events: in order, nothing after the final event. Recursive so that a
// sink may cancel its own request from inside the callback.
struct Delivery {
  std::recursive_mutex mutex;
  bool closed = false;
  EventSink sink;
  std::shared_ptr<RequestStream> stream;

  void Deliver(const EngineEvent& event) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    if (closed) return;
    if (event.finished) closed = true;
    if (sink) {
      sink(event);
    } else {
      stream->Push(event);
    }
  }
};

struct Engine::Request {
  uint64_t id = 0;
  std::unique_ptr<SequenceOutput> output;
  RequestTimings timings;
  int32_t prompt_tokens = 0;
  int32_t max_new_tokens = 0;
  bool beam_round = false;           // EngineRequest::beam_round
  int32_t cached_prompt_tokens = 0;  // prefix-cache hits at the first admission
  std::shared_ptr<Delivery> delivery;
  // Prompt logprobs (sampling.prompt_logprobs >= 0): the prompt, the entries computed so far
  // (sent with the first token) and the next prompt position still to score. Positions are
  // scored once, so a recompute after preemption does not repeat them.
  int32_t prompt_logprobs = -1;
  std::vector<int32_t> prompt;
  std::vector<PromptLogprob> prompt_lp;
  int32_t prompt_lp_next = 1;
  bool prompt_lp_sent = false;
  DraftLength draft_length;  // speculative decoding: how many tokens to draft next

  // Whether this step's chunk [num_computed, num_computed + num_new) holds prompt positions
  // whose logits score a prompt token not yet scored.
  bool WantsPromptRows(const ScheduledSeq& s) const {
    return prompt_logprobs >= 0 && prompt_lp_next < prompt_tokens &&
           s.num_computed + s.num_new > prompt_lp_next - 1 && s.num_computed < prompt_tokens - 1;
  }
};

struct Engine::Pending {
  std::shared_ptr<Delivery> delivery;
  EngineEvent event;
};

void Engine::DeliverNow(std::vector<Pending>& batch) {
  for (Pending& p : batch) {
    // Counted out first: whoever receives a final event finds its request finished, as when
    // events were delivered on the engine thread after the request left requests_.
    if (p.event.finished) undelivered_finals_.fetch_sub(1);
    p.delivery->Deliver(p.event);
  }
  batch.clear();
}

Engine::Engine(ModelRunner* runner, const Tokenizer* tokenizer, const EngineConfig& config,
               EngineObserver* observer)
    : runner_(runner),
      tokenizer_(tokenizer),
      config_(config),
      observer_(observer) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(ModelRunner* runner,
                                                       const Tokenizer* tokenizer,
                                                       const EngineConfig& config,
                                                       EngineObserver* observer) {
  std::unique_ptr<Engine> engine(new Engine(runner, tokenizer, config, observer));
  SchedulerConfig& sc = engine->config_.scheduler;
  BLOSSOM_RETURN_IF_ERROR(Validate(config.speculative));
  if (config.speculative_max_running < 0) {
    return absl::InvalidArgumentError(absl::StrCat("speculative_max_running must be >= 0, got ",
                                                   config.speculative_max_running));
  }
  if (sc.block_size <= 0) return absl::InvalidArgumentError("block_size must be positive");
  if (sc.num_blocks <= 0) {
    const size_t per_block = runner->KvBytesPerBlock(sc.block_size);
    sc.num_blocks = static_cast<int32_t>(BlocksInBudget(config.kv_cache_bytes, per_block));
    if (sc.num_blocks <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV cache budget of ", config.kv_cache_bytes, " bytes holds no block of ",
                       per_block, " bytes"));
    }
  }
  BLOSSOM_RETURN_IF_ERROR(runner->AllocateKvCache(sc.num_blocks, sc.block_size));
  // Before the first request, so that none waits for a GEMM plan or a graph capture.
  BLOSSOM_RETURN_IF_ERROR(runner->WarmUp(sc.max_num_batched_tokens, sc.max_num_seqs));
  BLOSSOM_ASSIGN_OR_RETURN(engine->scheduler_, Scheduler::Create(sc));
  if (config.device_sampling) {
    BLOSSOM_ASSIGN_OR_RETURN(engine->sampler_, runner->MakeBatchSampler());
  } else {
    engine->sampler_ = std::make_unique<HostBatchSampler>();
  }
  engine->deliverer_ = std::make_unique<HandoffThread<Pending>>(
      [e = engine.get()](std::vector<Pending>& batch) { e->DeliverNow(batch); });
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::~Engine() { Shutdown(); }

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(EngineRequest request,
                                                              EventSink sink) {
  const int64_t vocab = runner_->vocab_size();
  if (request.prompt_tokens.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (int32_t t : request.prompt_tokens) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token id ", t, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  BLOSSOM_RETURN_IF_ERROR(Validate(request.sampling, static_cast<int32_t>(vocab)));
  BLOSSOM_RETURN_IF_ERROR(Validate(request.stopping, static_cast<int32_t>(vocab)));

  auto req = std::make_unique<Request>();
  req->timings.arrival = Clock::now();
  req->output = std::make_unique<SequenceOutput>(tokenizer_, request.prompt_tokens,
                                                 request.sampling, request.stopping,
                                                 end_token_ids());
  {
    // Its own masks and bans may leave no first token: refused now, not after its prefill.
    absl::StatusOr<SampleRow> first = req->output->PrepareSample(0);
    if (first.ok()) {
      BLOSSOM_RETURN_IF_ERROR(CheckSomeTokenPossible(*first->params, first->context, vocab));
    }
  }
  req->prompt_tokens = static_cast<int32_t>(request.prompt_tokens.size());
  req->prompt_logprobs = request.sampling.prompt_logprobs;
  req->max_new_tokens = request.stopping.max_new_tokens;
  req->beam_round = request.beam_round;
  req->draft_length = DraftLength(config_.speculative.num_speculative_tokens);
  if (req->prompt_logprobs >= 0) req->prompt = request.prompt_tokens;
  req->delivery = std::make_shared<Delivery>();
  req->delivery->sink = std::move(sink);
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return EngineShutdownError("the engine is shutting down");
    if (!failure_.ok()) {
      return absl::UnavailableError(absl::StrCat("the model can no longer run (",
                                                 failure_.message(),
                                                 "); this server must be restarted"));
    }
    req->id = next_id_++;
    stream = std::make_shared<RequestStream>(req->id);
    req->delivery->stream = stream;
    SequenceSpec spec;
    spec.id = req->id;
    // A 1-token prompt has no row to score: a cap and cache misses would only slow it down.
    const bool rows = request.sampling.prompt_logprobs >= 0 && request.prompt_tokens.size() > 1;
    spec.prompt_tokens = std::move(request.prompt_tokens);
    spec.max_new_tokens = request.stopping.max_new_tokens;
    spec.priority = request.priority;
    spec.bypass_waiting_limits = request.bypass_waiting_limits;
    spec.skip_prefix_cache = rows;
    if (rows) spec.max_chunk_tokens = std::max(1, config_.max_prompt_logprob_rows);
    BLOSSOM_RETURN_IF_ERROR(scheduler_->AddRequest(spec));
    requests_[req->id] = std::move(req);
  }
  work_cv_.notify_one();
  return stream;
}

absl::StatusOr<Tensor> Engine::ForwardStep(const StepBatch& batch,
                                           std::vector<float>& host_logits) {
  if (config_.device_sampling) return runner_->ForwardKeepLogits(batch);
  const int64_t vocab = runner_->vocab_size();
  const int64_t rows = std::max<int64_t>(1, batch.logit_rows.size());
  host_logits.resize(static_cast<size_t>(rows * vocab));
  BLOSSOM_RETURN_IF_ERROR(runner_->Forward(batch, host_logits.data()));
  return Tensor(host_logits.data(), DType::kF32, {rows, vocab});
}

absl::Status Engine::ScorePromptRowsLocked(Request& request, const ScheduledSeq& s,
                                           const Tensor& logits, int64_t first_row) {
  std::vector<ScoreRow> rows;
  std::vector<int32_t> targets;
  for (int32_t i = 0; i < s.num_new; ++i) {
    const int32_t target = s.num_computed + i + 1;  // the row at position p scores token p + 1
    if (target < request.prompt_lp_next || target >= request.prompt_tokens) continue;
    rows.push_back({first_row + i, request.prompt[target], request.prompt_logprobs});
    targets.push_back(target);
  }
  std::vector<absl::StatusOr<SampleResult>> scored;
  BLOSSOM_RETURN_IF_ERROR(sampler_->ScoreRows(logits, rows, &scored));
  for (size_t j = 0; j < scored.size(); ++j) {
    if (!scored[j].ok()) return scored[j].status();
    SampleResult& row = *scored[j];
    request.prompt_lp.push_back({row.token, row.logprob, row.rank, std::move(row.top)});
    request.prompt_lp_next = targets[j] + 1;
  }
  return absl::OkStatus();
}

void Engine::FinishLocked(Request& request, EngineEvent* event) {
  event->finished = true;
  event->request_id = request.id;
  request.timings.finished = event->time = Clock::now();
  event->timings = request.timings;
  event->usage.prompt_tokens = request.prompt_tokens;
  event->usage.cached_prompt_tokens = request.cached_prompt_tokens;
  event->usage.generated_tokens = static_cast<int32_t>(request.output->output_tokens().size());
  event->seed = request.output->seed();
  event->max_new_tokens = request.max_new_tokens;
  event->beam_round = request.beam_round;
}

EngineEvent Engine::EndEarlyLocked(Request& request, FinishReason reason, absl::Status status) {
  scheduler_->Cancel(request.id);  // frees its KV blocks now
  EngineEvent event;
  event.finish_reason = reason;
  event.status = std::move(status);
  event.token.text_delta = request.output->Abort(reason);  // held-back text is not lost
  FinishLocked(request, &event);
  if (observer_) observer_->OnRequestFinished(event);
  return event;
}

bool Engine::FailForGoodLocked(std::vector<Pending>& pending) {
  if (!failure_.ok()) return false;
  absl::Status health = runner_->Health();
  if (health.ok()) return false;  // that step failed; the next may run
  failure_ = std::move(health);
  const absl::Status ended = absl::UnavailableError(absl::StrCat(
      "the model can no longer run (", failure_.message(), "); this server must be restarted"));
  for (auto& [id, r] : requests_) {
    pending.push_back({r->delivery, EndEarlyLocked(*r, FinishReason::kError, ended)});
  }
  requests_.clear();
  return true;
}

bool Engine::Cancel(uint64_t request_id) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = requests_.find(request_id);
    if (it == requests_.end()) return false;
    pending.delivery = it->second->delivery;
    pending.event = EndEarlyLocked(*it->second, FinishReason::kCancelled, absl::OkStatus());
    requests_.erase(it);
    undelivered_finals_.fetch_add(1);
  }
  // Delivered here, not behind the steps' events still with the deliverer: the request's
  // stream ends now (its Delivery drops whatever comes after the final event).
  std::vector<Pending> batch;
  batch.push_back(std::move(pending));
  DeliverNow(batch);
  return true;
}

void Engine::Shutdown() {
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    // Aborted, not failed: the request was healthy, and another server may run it.
    const absl::Status cut =
        EngineShutdownError("the server shut down before the request finished");
    for (auto& [id, r] : requests_) {
      pending.push_back({r->delivery, EndEarlyLocked(*r, FinishReason::kAborted, cut)});
    }
    requests_.clear();
    undelivered_finals_.fetch_add(static_cast<int64_t>(pending.size()));
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The last steps' events first, so that each stream keeps its order.
  if (deliverer_ != nullptr) deliverer_->Flush();
  DeliverNow(pending);
}

absl::Status Engine::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

SchedulerStats Engine::scheduler_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scheduler_->stats();
}

int64_t Engine::num_unfinished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(requests_.size()) + undelivered_finals_.load();
}

bool Engine::SampleRoundsLocked(const StepPlan& plan, const Tensor& logits,
                                Clock::time_point step_end, std::vector<size_t> seq_of,
                                std::vector<SampleRow> rows, std::vector<SeqOutput>& outputs,
                                std::vector<Pending>& pending, StepStats& step) {
  bool had_error = false;
  auto decide = [&](size_t k, size_t round, const SampleRow& row,
                    absl::StatusOr<SampleResult> sample)
      -> absl::StatusOr<absl::optional<SampleRow>> {
    const ScheduledSeq& s = plan.seqs[k];
    SeqOutput& out = outputs[k];
    auto it = requests_.find(s.id);
    Request& r = *it->second;  // present: erased only here, after its last round
    absl::StatusOr<TokenEvent> token =
        sample.ok() ? r.output->Accept(std::move(*sample)) : sample.status();
    if (!token.ok()) {
      had_error = true;
      pending.push_back({r.delivery, EndEarlyLocked(r, FinishReason::kError, token.status())});
      requests_.erase(it);
      return absl::nullopt;
    }
    EngineEvent event;
    event.request_id = r.id;
    event.time = step_end;
    if (r.timings.first_token == Clock::time_point{}) {
      r.timings.first_token = step_end;
      // A beam-search round's prompt is the search's prompt and its beam so far: the search
      // counts its prompt once, when it ends (ServerMetrics::ObserveBeamSearch).
      if (!r.beam_round) step.finished_prompt_tokens += r.prompt_tokens;
      if (observer_) observer_->OnFirstToken(r.timings, r.beam_round);
    }
    ++step.generated_tokens;
    event.has_token = true;
    absl::optional<SampleRow> next;
    if (DraftVerified(s.draft_tokens, round, token->token, token->finished)) {
      // The model sampled the draft itself: keep it and verify the next one from its row.
      ++step.accepted_draft_tokens;
      // (PrepareSample fails only for a finished sequence; had it failed, the token would
      // simply end the step's verification.)
      absl::StatusOr<SampleRow> next_row = r.output->PrepareSample(row.logit_row + 1);
      if (next_row.ok()) next = *next_row;
    }
    if (!next.has_value() && !s.draft_tokens.empty()) {
      // The sequence's verification ends here: `round` of its drafts were accepted.
      r.draft_length.Observe(static_cast<int32_t>(s.draft_tokens.size()),
                             static_cast<int32_t>(round));
    }
    out.accepted_drafts = static_cast<int32_t>(round);
    out.token = token->token;
    out.finished = token->finished;
    event.finish_reason = token->finish_reason;
    event.token = std::move(*token);
    if (r.prompt_logprobs >= 0 && !r.prompt_lp_sent) {
      event.prompt_logprobs = std::move(r.prompt_lp);
      r.prompt_lp_sent = true;
    }
    if (out.finished) FinishLocked(r, &event);
    if (event.finished && observer_) observer_->OnRequestFinished(event);
    pending.push_back({r.delivery, std::move(event)});
    if (out.finished) requests_.erase(it);
    return next;
  };
  // Every error is handled per request above, so the call itself cannot fail.
  (void)SampleInRounds(*sampler_, logits, std::move(seq_of), std::move(rows), decide,
                       &step.sample_seconds);
  return had_error;
}

void Engine::Loop() {
  StepBatch batch;
  std::vector<float> host_logits;  // the step's logits without device_sampling
  std::vector<Pending> pending;
  std::vector<int32_t> rows_of;        // logit rows per plan.seqs entry
  std::vector<bool> prompt_rows_of;    // whether those rows are the whole chunk (prompt logprobs)
  std::vector<SampleRow> sample_rows;  // this step's rows to sample
  std::vector<size_t> sampled_seq;     // the plan.seqs index of each of sample_rows
  std::vector<int32_t> chunk;  // a decode entry's known token and its drafts
  double handoff_seconds = 0.0;  // the previous step's Hand(), reported with this step
  const DraftFn propose_draft =
      config_.speculative.num_speculative_tokens > 0
          ? DraftFn([this](SeqId id, absl::Span<const int32_t> tokens, int32_t max_tokens) {
              // Under mutex_ (Schedule's caller holds it).
              auto it = requests_.find(id);
              const int32_t limit =
                  it == requests_.end()
                      ? max_tokens
                      : std::min(max_tokens, it->second->draft_length.tokens());
              return ProposeNgramDraft(config_.speculative, tokens, limit);
            })
          : DraftFn();
  while (true) {
    StepPlan plan;
    Clock::time_point plan_start;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Sleeps while idle: no busy waiting.
      work_cv_.wait(lock, [&] { return stopping_ || scheduler_->HasWork(); });
      if (stopping_) return;
      plan_start = Clock::now();
      const bool speculate =
          propose_draft && static_cast<int64_t>(scheduler_->num_running()) <=
                               config_.speculative_max_running;
      plan = scheduler_->Schedule(speculate ? propose_draft : DraftFn());
      if (plan.empty()) {
        // Work exists but none fits right now (cannot normally happen: requests that can never
        // fit are refused at Submit). Back off instead of spinning.
        work_cv_.wait_for(lock, std::chrono::milliseconds(5));
        continue;
      }
      const Clock::time_point now = Clock::now();
      batch.Clear();
      int32_t max_blocks = 1;
      for (const ScheduledSeq& s : plan.seqs)
        max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>(s.block_table.size()));
      batch.max_blocks_per_seq = max_blocks;
      rows_of.clear();
      prompt_rows_of.clear();
      for (const ScheduledSeq& s : plan.seqs) {
        auto it = requests_.find(s.id);
        if (it != requests_.end() && it->second->timings.first_scheduled == Clock::time_point{}) {
          it->second->timings.first_scheduled = now;
          it->second->cached_prompt_tokens = s.num_cached;
        }
        const bool prompt_rows = it != requests_.end() && it->second->WantsPromptRows(s);
        absl::Span<const int32_t> tokens = scheduler_->Tokens(s.id).subspan(s.num_computed,
                                                                             s.num_new);
        if (!s.draft_tokens.empty()) {
          // Every draft position's row too: row i verifies draft i (decode entries only, so
          // prompt_rows is false).
          chunk.assign(tokens.begin(), tokens.end());
          chunk.insert(chunk.end(), s.draft_tokens.begin(), s.draft_tokens.end());
          tokens = chunk;
        }
        const bool all_rows = prompt_rows || !s.draft_tokens.empty();
        batch.AddSequence(tokens, s.num_computed, s.block_table, s.sample, all_rows);
        rows_of.push_back(all_rows ? static_cast<int32_t>(tokens.size()) : (s.sample ? 1 : 0));
        prompt_rows_of.push_back(prompt_rows);
      }
      for (uint64_t id : plan.preempted) {
        auto it = requests_.find(id);
        if (it != requests_.end()) ++it->second->timings.num_preemptions;
      }
    }

    const Clock::time_point step_start = Clock::now();
    // Valid until the next step: only this iteration reads it.
    const absl::StatusOr<Tensor> logits = ForwardStep(batch, host_logits);
    const Clock::time_point step_end = Clock::now();

    StepStats step;
    bool step_had_error = false;  // a request of this step ended with an error
    absl::Status failure;  // failure_ when this step found the runner unusable for good
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<SeqOutput> outputs(plan.seqs.size());
      // First pass: failures, prompt logprobs, and the rows to sample (sample_rows[j] is
      // plan.seqs[sampled_seq[j]]'s). The sampler then draws the step's tokens in one call per
      // round (one round without drafts).
      sample_rows.clear();
      sampled_seq.clear();
      size_t row = 0;
      for (size_t k = 0; k < plan.seqs.size(); ++k) {
        const ScheduledSeq& s = plan.seqs[k];
        outputs[k].id = s.id;
        const size_t first_row = row;
        row += rows_of[k];
        // The row after the chunk's last known token (its drafts' rows follow it).
        const size_t my_row = s.sample ? row - 1 - s.draft_tokens.size() : 0;
        auto it = requests_.find(s.id);
        if (it == requests_.end()) continue;  // cancelled during the forward pass
        Request& r = *it->second;
        if (!logits.ok()) {
          pending.push_back(
              {r.delivery,
               EndEarlyLocked(r, FinishReason::kError,
                              absl::InternalError(absl::StrCat("model step failed: ",
                                                               logits.status().message())))});
          requests_.erase(it);
          continue;
        }
        if (prompt_rows_of[k]) {
          // Before the sampler: a device sampler may edit its rows in place.
          const absl::Status scored =
              ScorePromptRowsLocked(r, s, *logits, static_cast<int64_t>(first_row));
          if (!scored.ok()) {
            step_had_error = true;
            pending.push_back({r.delivery, EndEarlyLocked(r, FinishReason::kError, scored)});
            requests_.erase(it);
            continue;
          }
          // Every prompt row scored: a recompute after a preemption needs none, so it may run
          // at the token budget's pace, from the prefix cache.
          if (r.prompt_lp_next >= r.prompt_tokens) scheduler_->PromptRowsDone(s.id);
        }
        if (!s.sample) continue;
        absl::StatusOr<SampleRow> sample_row =
            r.output->PrepareSample(static_cast<int64_t>(my_row));
        if (!sample_row.ok()) {
          step_had_error = true;
          pending.push_back(
              {r.delivery, EndEarlyLocked(r, FinishReason::kError, sample_row.status())});
          requests_.erase(it);
          continue;
        }
        sample_rows.push_back(*sample_row);
        sampled_seq.push_back(k);
      }
      // Rows exist only when the step succeeded (a failed step ended every request above).
      if (!sample_rows.empty()) {
        step_had_error |=
            SampleRoundsLocked(plan, *logits, step_end, std::move(sampled_seq),
                               std::move(sample_rows), outputs, pending, step);
      }
      absl::Status update = scheduler_->Update(plan, outputs);
      (void)update;  // Update only fails on engine bugs; outputs for unknown ids are ignored
      // After any failure in the step (the forward, a copy, the sampler): a device that is
      // unusable for good may show it only there.
      if ((!logits.ok() || step_had_error) && FailForGoodLocked(pending)) failure = failure_;
      const SchedulerStats ss = scheduler_->stats();
      step.batch_size = static_cast<int32_t>(plan.seqs.size());
      step.prefill_tokens = plan.num_prefill_tokens;
      step.decode_tokens = plan.num_decode_tokens;
      step.cached_prompt_tokens = plan.num_cached_prompt_tokens;
      step.draft_tokens = plan.num_draft_tokens;
      step.duration_seconds = std::chrono::duration<double>(step_end - step_start).count();
      step.schedule_seconds = std::chrono::duration<double>(step_start - plan_start).count();
      step.blocks_used = ss.blocks_used;
      step.blocks_total = ss.blocks_total;
      step.preemptions = static_cast<int32_t>(plan.preempted.size());
      step.running = ss.running;
      step.waiting = ss.waiting;
      for (const Pending& p : pending) {
        if (p.event.finished) undelivered_finals_.fetch_add(1);
      }
    }
    step.output_seconds =
        std::chrono::duration<double>(Clock::now() - step_end).count() - step.sample_seconds;
    step.deliver_seconds = handoff_seconds;
    // Metrics first: a client that has its final event finds its tokens counted.
    if (observer_) observer_->OnStep(step);
    if (!failure.ok() && observer_) observer_->OnEngineFailed(failure);
    const Clock::time_point handoff_start = Clock::now();
    deliverer_->Hand(pending);  // streamed while the next step runs
    handoff_seconds = std::chrono::duration<double>(Clock::now() - handoff_start).count();
  }
}

}  // namespace blossom
