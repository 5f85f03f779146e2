#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace blossom {

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config) {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("SchedulerConfig.", name, " must be >= 1, got ", v));
  };
  for (absl::Status s :
       {positive("num_blocks", config.num_blocks), positive("block_size", config.block_size),
        positive("max_num_seqs", config.max_num_seqs),
        positive("max_num_batched_tokens", config.max_num_batched_tokens),
        positive("max_total_tokens", config.max_total_tokens)}) {
    if (!s.ok()) return s;
  }
  if (config.max_waiting_requests < 0 || config.max_waiting_prompt_tokens < 0) {
    return absl::InvalidArgumentError(
        "SchedulerConfig.max_waiting_requests and max_waiting_prompt_tokens must be >= 0");
  }
  return std::unique_ptr<Scheduler>(new Scheduler(config));
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      blocks_(config.num_blocks, config.block_size, config.enable_prefix_caching,
              config.block_hash_fn != nullptr ? config.block_hash_fn : &DefaultBlockHash) {}

absl::Status Scheduler::CheckFits(int64_t prompt, int32_t max_new_tokens,
                                  bool bypass_waiting_limits) const {
  if (prompt == 0) return absl::InvalidArgumentError("prompt is empty");
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  const int64_t total = prompt + max_new_tokens;
  if (total > config_.max_total_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt, " tokens) + max_new_tokens (", max_new_tokens,
                     ") = ", total, " exceeds max_total_tokens (", config_.max_total_tokens, ")"));
  }
  // Checked so that block pressure can never fail an admitted request: alone on the pool (all
  // others preempted) every request fits.
  const int64_t blocks_needed = (total + config_.block_size - 1) / config_.block_size;
  if (blocks_needed > blocks_.num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt, " tokens) + max_new_tokens (", max_new_tokens, ") needs ",
        blocks_needed, " KV blocks of ", config_.block_size,
        " tokens, more than the whole KV cache (num_blocks ", blocks_.num_blocks(), ")"));
  }
  // Without chunking a (re)prefill runs in one step: after preemption it covers prompt + all
  // outputs but the last, which must fit the token budget or the request would wait forever.
  if (!config_.enable_chunked_prefill && total - 1 > config_.max_num_batched_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt, " tokens) + max_new_tokens (", max_new_tokens,
        ") may need a prefill of ", total - 1, " tokens, more than max_num_batched_tokens (",
        config_.max_num_batched_tokens, ") with chunked prefill off"));
  }
  // Not ResourceExhausted, which invites a retry: even an empty queue refuses such a prompt.
  if (!bypass_waiting_limits && prompt > config_.max_waiting_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt, " tokens) exceeds max_waiting_prompt_tokens (",
        config_.max_waiting_prompt_tokens, "): the waiting queue can never hold it"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::CheckWaitingRoom(int64_t requests, int64_t tokens) const {
  if (static_cast<int64_t>(waiting_.size()) + requests > config_.max_waiting_requests) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "waiting queue is full: ", waiting_.size(), " requests waiting + ", requests,
        " would exceed max_waiting_requests (", config_.max_waiting_requests, ")"));
  }
  if (waiting_tokens_ + tokens > config_.max_waiting_prompt_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "waiting queue is full: ", waiting_tokens_, " tokens waiting + ", tokens,
        " would exceed max_waiting_prompt_tokens (", config_.max_waiting_prompt_tokens, ")"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::AddRequest(const SequenceSpec& spec) {
  const int64_t prompt = static_cast<int64_t>(spec.prompt_tokens.size());
  absl::Status fits = CheckFits(prompt, spec.max_new_tokens, spec.bypass_waiting_limits);
  if (!fits.ok()) return fits;
  const int64_t total = prompt + spec.max_new_tokens;
  if (seqs_.contains(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", spec.id, " already exists"));
  }
  if (!spec.bypass_waiting_limits &&
      static_cast<int64_t>(waiting_.size()) >= config_.max_waiting_requests) {
    return absl::ResourceExhaustedError(absl::StrCat("waiting queue is full: ", waiting_.size(),
                                                     " requests waiting (max_waiting_requests ",
                                                     config_.max_waiting_requests, ")"));
  }
  if (!spec.bypass_waiting_limits &&
      waiting_tokens_ + prompt > config_.max_waiting_prompt_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "waiting queue is full: ", waiting_tokens_, " tokens waiting + ", prompt,
        " would exceed max_waiting_prompt_tokens (", config_.max_waiting_prompt_tokens, ")"));
  }

  auto seq = std::make_unique<Sequence>();
  seq->id = spec.id;
  seq->tokens = spec.prompt_tokens;
  seq->tokens.reserve(static_cast<size_t>(total));
  seq->num_prompt = static_cast<int32_t>(prompt);
  seq->max_new_tokens = spec.max_new_tokens;
  seq->priority = spec.priority;
  seq->skip_prefix_cache = spec.skip_prefix_cache;
  seq->max_chunk_tokens = spec.max_chunk_tokens;
  seq->arrival = next_arrival_++;
  seq->queue_order = seq->arrival;
  Sequence* s = seq.get();
  seqs_.emplace(spec.id, std::move(seq));
  PushWaiting(s);
  return absl::OkStatus();
}

namespace {

// A capped sequence's prefill tokens this step: at most its cap, and what the step's capped
// budget (the first capped sequence's cap; the engine gives them all the same) has left.
int32_t TakeCappedRows(int32_t cap, int32_t wanted, int32_t* left) {
  if (*left < 0) *left = cap;
  const int32_t take = std::min({wanted, cap, *left});
  *left -= take;
  return take;
}

}  // namespace

StepPlan Scheduler::Schedule(const DraftFn& propose_draft) {
  StepPlan plan;
  int32_t budget = config_.max_num_batched_tokens;
  bool preempted_any = false;
  // Prefill tokens of capped sequences (max_chunk_tokens) left this step: the cap bounds the
  // step, not each sequence (eight capped prefills would otherwise take eight caps' rows).
  int32_t capped_rows_left = -1;  // unset until the first capped sequence
  // Blocks the running sequences from j on need for their own known tokens (at most what this
  // step computes of them), and how many of them have a token to compute: drafts only take the
  // blocks and the budget beyond those (one token each), so drafts never preempt anything nor
  // leave a later sequence without its step.
  std::vector<int32_t> needed_from(running_.size() + 1, 0);
  std::vector<int32_t> pending_from(running_.size() + 1, 0);
  if (propose_draft) {
    for (size_t j = running_.size(); j-- > 0;) {
      const Sequence* r = running_[j];
      const int32_t known = static_cast<int32_t>(r->tokens.size());
      const int32_t extra = blocks_.BlocksNeeded(known) -
                            static_cast<int32_t>(blocks_.BlockTable(r->id).size());
      needed_from[j] = needed_from[j + 1] + std::max(extra, 0);
      pending_from[j] = pending_from[j + 1] + (known > r->num_computed ? 1 : 0);
    }
  }

  // 1. Running sequences, highest priority / oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int32_t known = static_cast<int32_t>(s->tokens.size());
    int32_t num_new = known - s->num_computed;
    if (num_new <= 0) {  // only if Update's contract was broken; Update forgets such sequences
      ++i;
      continue;
    }
    if (num_new > budget) {
      if (!config_.enable_chunked_prefill) {
        ++i;
        continue;
      }
      num_new = budget;
    }
    if (config_.enable_chunked_prefill && s->max_chunk_tokens > 0 &&
        s->num_computed < s->prefill_len) {
      num_new = TakeCappedRows(s->max_chunk_tokens, num_new, &capped_rows_left);
      if (num_new == 0) {  // the step's capped rows are spent: the next step goes on
        ++i;
        continue;
      }
    }
    std::vector<int32_t> draft;
    if (propose_draft && num_new == 1 && s->num_computed >= s->prefill_len) {
      const int32_t outputs = known - s->num_prompt;
      const int32_t max_draft = std::min(s->max_new_tokens - outputs - 1,
                                         budget - num_new - pending_from[i + 1]);
      if (max_draft > 0) {
        draft = propose_draft(s->id, s->tokens, max_draft);
        // As many drafts as the slots of the table and of the spare blocks hold.
        const int32_t spare = blocks_.num_free_blocks() - needed_from[i + 1];
        const int32_t slots =
            (static_cast<int32_t>(blocks_.BlockTable(s->id).size()) + std::max(spare, 0)) *
                config_.block_size -
            (s->num_computed + num_new);
        const int32_t keep = std::max(0, std::min(max_draft, slots));
        if (static_cast<int32_t>(draft.size()) > keep) draft.resize(keep);
      }
    }
    const int32_t num_draft = static_cast<int32_t>(draft.size());
    bool preempted_self = false;
    while (!blocks_.CanAppend(s->id, s->num_computed + num_new + num_draft)) {
      // Victims come from the back, i.e. after i: nothing already in the plan is preempted.
      Sequence* victim = running_.back();
      Preempt(victim);
      plan.preempted.push_back(victim->id);
      preempted_any = true;
      if (victim == s) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;  // every sequence after it is gone too
    absl::Status appended = blocks_.Append(s->id, s->num_computed + num_new + num_draft);
    (void)appended;  // cannot fail: CanAppend just said so
    ScheduledSeq entry;
    entry.id = s->id;
    entry.num_computed = s->num_computed;
    entry.num_new = num_new;
    entry.is_prefill = s->num_computed < s->prefill_len;
    entry.sample = s->num_computed + num_new == known;
    entry.draft_tokens = std::move(draft);
    const absl::Span<const int32_t> table = blocks_.BlockTable(s->id);
    entry.block_table.assign(table.begin(), table.end());
    (entry.is_prefill ? plan.num_prefill_tokens : plan.num_decode_tokens) += num_new + num_draft;
    plan.num_draft_tokens += num_draft;
    plan.seqs.push_back(std::move(entry));
    budget -= num_new + num_draft;
    ++i;
  }

  // 2. Waiting sequences. Not in a step that had to preempt: the pool is full, admitting would
  // only preempt again next step (vLLM V1 does the same).
  // In order; only a capped sequence whose step budget is spent is passed over (it keeps its
  // place for the next step), so requests without prompt logprobs are not held up behind it.
  auto next = waiting_.begin();
  while (!preempted_any && next != waiting_.end() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* s = seqs_.find(std::get<2>(*next))->second.get();
    ++next;  // before EraseWaiting invalidates the current one
    const int32_t known = static_cast<int32_t>(s->tokens.size());
    const int32_t cached = blocks_.CachedPrefixLength(s->tokens, !s->skip_prefix_cache);
    // Only a first admission counts as a prefix-cache query (BlockManagerStats): a re-admission
    // after a preemption (queue_order < 0) finds mostly its own blocks.
    const bool count_query = s->queue_order >= 0;
    int32_t num_new = known - cached;
    if (num_new > budget) {
      if (!config_.enable_chunked_prefill) break;  // strict FCFS: the head waits, nobody passes
      num_new = budget;
    }
    if (config_.enable_chunked_prefill && s->max_chunk_tokens > 0) {
      num_new = TakeCappedRows(s->max_chunk_tokens, num_new, &capped_rows_left);
      if (num_new == 0) continue;
    }
    absl::StatusOr<int32_t> hit =
        blocks_.AllocatePrompt(s->id, s->tokens, cached + num_new, !s->skip_prefix_cache,
                               count_query);
    if (!hit.ok()) break;  // not enough free blocks: wait for running sequences to finish
    num_new = std::min(num_new, known - *hit);  // *hit == cached: nothing changed in between
    EraseWaiting(s);
    s->num_computed = *hit;
    s->prefill_len = known;
    InsertRunning(s);

    ScheduledSeq entry;
    entry.id = s->id;
    entry.num_computed = s->num_computed;
    entry.num_new = num_new;
    entry.is_prefill = true;
    entry.sample = s->num_computed + num_new == known;
    entry.num_cached = *hit;
    const absl::Span<const int32_t> table = blocks_.BlockTable(s->id);
    entry.block_table.assign(table.begin(), table.end());
    plan.num_prefill_tokens += num_new;
    plan.num_cached_prompt_tokens += *hit;
    plan.seqs.push_back(std::move(entry));
    budget -= num_new;
  }
  return plan;
}

void Scheduler::PromptRowsDone(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  it->second->max_chunk_tokens = 0;
  it->second->skip_prefix_cache = false;
}

absl::Status Scheduler::Update(const StepPlan& plan, absl::Span<const SeqOutput> outputs) {
  std::vector<std::string> errors;
  absl::flat_hash_map<SeqId, const SeqOutput*> out_by_id;
  out_by_id.reserve(outputs.size());
  for (const SeqOutput& o : outputs) {
    if (!out_by_id.emplace(o.id, &o).second) {
      errors.push_back(absl::StrCat("sequence ", o.id, ": duplicate output ignored"));
    }
  }

  for (const ScheduledSeq& entry : plan.seqs) {
    const SeqOutput* out = nullptr;
    if (auto oit = out_by_id.find(entry.id); oit != out_by_id.end()) {
      out = oit->second;
      out_by_id.erase(oit);
    }
    auto it = seqs_.find(entry.id);
    if (it == seqs_.end()) continue;  // cancelled since Schedule()
    Sequence* s = it->second.get();
    // Cancelled and re-added under the same id (then it is waiting), or a stale plan.
    if (!s->running || s->num_computed != entry.num_computed ||
        entry.num_computed + entry.num_new > static_cast<int32_t>(s->tokens.size())) {
      continue;
    }
    s->num_computed += entry.num_new;
    bool finish = out != nullptr && out->finished;
    const int32_t accepted = out != nullptr ? out->accepted_drafts : 0;
    const int32_t num_draft = static_cast<int32_t>(entry.draft_tokens.size());
    if (accepted < 0 || accepted > num_draft) {
      errors.push_back(absl::StrCat("sequence ", s->id, ": ", accepted, " accepted drafts of ",
                                    num_draft, "; finished"));
      finish = true;
    } else if (accepted > 0 && static_cast<int32_t>(s->tokens.size()) - s->num_prompt +
                                       accepted > s->max_new_tokens) {
      errors.push_back(absl::StrCat("sequence ", s->id, ": accepted drafts beyond max_new_tokens (",
                                    s->max_new_tokens, ") dropped; finished"));
      finish = true;
    } else if (accepted > 0) {
      // Their KV was computed this step from the tokens before them, all now known.
      s->tokens.insert(s->tokens.end(), entry.draft_tokens.begin(),
                       entry.draft_tokens.begin() + accepted);
      s->num_computed += accepted;
    }
    blocks_.MarkComputed(s->id, s->tokens, s->num_computed);

    const int32_t num_outputs = static_cast<int32_t>(s->tokens.size()) - s->num_prompt;
    if (entry.sample) {
      if (out != nullptr && out->token.has_value()) {
        if (num_outputs < s->max_new_tokens) {
          s->tokens.push_back(*out->token);
        } else {
          errors.push_back(absl::StrCat("sequence ", s->id, ": token beyond max_new_tokens (",
                                        s->max_new_tokens, ") dropped; finished"));
          finish = true;
        }
      } else if (!finish) {
        errors.push_back(absl::StrCat("sequence ", s->id,
                                      ": sampled step without a token and not finished; finished"));
        finish = true;
      }
    } else if (out != nullptr && out->token.has_value()) {
      errors.push_back(
          absl::StrCat("sequence ", s->id, ": token for a step that does not sample ignored"));
    }
    if (!finish && static_cast<int32_t>(s->tokens.size()) - s->num_prompt >= s->max_new_tokens) {
      errors.push_back(absl::StrCat("sequence ", s->id, ": reached max_new_tokens (",
                                    s->max_new_tokens, ") but not finished; finished"));
      finish = true;
    }
    if (finish) {
      Forget(s);
    } else if (accepted < num_draft) {
      // Blocks taken for rejected drafts go back now: kept, the next step would count them as
      // this sequence's and preempt another sequence for a block they hold (drafts must never
      // preempt), or keep a waiting prompt out.
      blocks_.Truncate(s->id, static_cast<int32_t>(s->tokens.size()));
    }
  }
  for (const auto& [id, out] : out_by_id) {
    if (seqs_.contains(id)) {
      errors.push_back(
          absl::StrCat("sequence ", id, ": output for a sequence not in the plan ignored"));
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("Update: ", absl::StrJoin(errors, "; ")));
}

bool Scheduler::Cancel(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  Forget(it->second.get());
  return true;
}

absl::Span<const int32_t> Scheduler::Tokens(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return {};
  return it->second->tokens;
}

int32_t Scheduler::NumPromptTokens(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : it->second->num_prompt;
}

int32_t Scheduler::NumOutputTokens(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return 0;
  return static_cast<int32_t>(it->second->tokens.size()) - it->second->num_prompt;
}

bool Scheduler::IsRunning(SeqId id) const {
  auto it = seqs_.find(id);
  return it != seqs_.end() && it->second->running;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  st.running = static_cast<int64_t>(running_.size());
  st.waiting = static_cast<int64_t>(waiting_.size());
  st.waiting_tokens = waiting_tokens_;
  st.blocks_used = blocks_.num_used_blocks();
  st.blocks_total = blocks_.num_blocks();
  st.num_preemptions = num_preemptions_;
  st.prefix_cache_queries_tokens = blocks_.stats().prefix_cache_queries_tokens;
  st.prefix_cache_hit_tokens = blocks_.stats().prefix_cache_hit_tokens;
  st.cached_block_evictions = blocks_.stats().cached_block_evictions;
  return st;
}

void Scheduler::PushWaiting(Sequence* s) {
  s->running = false;
  waiting_.insert(KeyOf(*s));
  waiting_tokens_ += static_cast<int64_t>(s->tokens.size());
}

void Scheduler::EraseWaiting(Sequence* s) {
  waiting_.erase(KeyOf(*s));
  waiting_tokens_ -= static_cast<int64_t>(s->tokens.size());
}

void Scheduler::InsertRunning(Sequence* s) {
  s->running = true;
  auto pos = std::upper_bound(
      running_.begin(), running_.end(), s, [](const Sequence* a, const Sequence* b) {
        return std::tie(a->priority, a->arrival) < std::tie(b->priority, b->arrival);
      });
  running_.insert(pos, s);
}

void Scheduler::EraseRunning(Sequence* s) {
  s->running = false;
  running_.erase(std::find(running_.begin(), running_.end(), s));
}

void Scheduler::Preempt(Sequence* s) {
  blocks_.Free(s->id);
  EraseRunning(s);
  s->num_computed = 0;
  s->prefill_len = 0;
  s->queue_order = next_front_order_--;
  PushWaiting(s);
  ++num_preemptions_;
}

void Scheduler::Forget(Sequence* s) {
  if (s->running) {
    blocks_.Free(s->id);
    EraseRunning(s);
  } else {
    EraseWaiting(s);
  }
  seqs_.erase(s->id);  // destroys *s
}

absl::Status Scheduler::CheckInvariants() const {
  if (running_.size() + waiting_.size() != seqs_.size()) {
    return absl::InternalError(absl::StrCat("running ", running_.size(), " + waiting ",
                                            waiting_.size(), " != known ", seqs_.size()));
  }
  if (static_cast<int64_t>(running_.size()) > config_.max_num_seqs) {
    return absl::InternalError("more running sequences than max_num_seqs");
  }
  if (blocks_.num_seqs() != running_.size()) {
    return absl::InternalError("block tables do not match the running sequences");
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence* s = running_[i];
    auto it = seqs_.find(s->id);
    if (it == seqs_.end() || it->second.get() != s || !s->running) {
      return absl::InternalError(absl::StrCat("running entry ", s->id, " inconsistent"));
    }
    if (i > 0 && std::tie(running_[i - 1]->priority, running_[i - 1]->arrival) >=
                     std::tie(s->priority, s->arrival)) {
      return absl::InternalError("running list out of order");
    }
    if (!blocks_.Has(s->id) ||
        static_cast<int64_t>(blocks_.BlockTable(s->id).size()) * config_.block_size <
            s->num_computed) {
      return absl::InternalError(absl::StrCat("running ", s->id, ": table misses computed KV"));
    }
  }
  int64_t waiting_tokens = 0;
  for (const WaitKey& key : waiting_) {
    auto it = seqs_.find(std::get<2>(key));
    if (it == seqs_.end() || it->second->running || KeyOf(*it->second) != key) {
      return absl::InternalError(absl::StrCat("waiting entry ", std::get<2>(key), " inconsistent"));
    }
    if (it->second->num_computed != 0 || blocks_.Has(it->first)) {
      return absl::InternalError(absl::StrCat("waiting ", it->first, " holds KV"));
    }
    waiting_tokens += static_cast<int64_t>(it->second->tokens.size());
  }
  if (waiting_tokens != waiting_tokens_) return absl::InternalError("waiting token count drift");
  for (const auto& [id, s] : seqs_) {
    const int32_t outs = static_cast<int32_t>(s->tokens.size()) - s->num_prompt;
    if (outs < 0 || outs > s->max_new_tokens) {
      return absl::InternalError(absl::StrCat("sequence ", id, ": ", outs, " outputs"));
    }
    if (s->num_computed > static_cast<int32_t>(s->tokens.size())) {
      return absl::InternalError(absl::StrCat("sequence ", id, ": computed beyond its tokens"));
    }
  }
  return blocks_.CheckInvariants();
}

}  // namespace blossom
