// Iteration-level continuous batching: each engine step asks Schedule() which tokens of which
// sequences to compute, runs the model, and closes the loop with Update().
//
// Pure: no device, no threads, no clocks, no model. Driven by the single engine-loop thread.
#ifndef BLOSSOM_ENGINE_SCHEDULER_SCHEDULER_H_
#define BLOSSOM_ENGINE_SCHEDULER_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "engine/scheduler/block_manager.h"

namespace blossom {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;             // running sequences at once
  int32_t max_num_batched_tokens = 2048;  // sum of new tokens per step (the token budget)
  int32_t max_total_tokens = 2048;        // prompt + max_new_tokens cap per request
  int32_t max_waiting_requests = 1024;    // queue bound: beyond it AddRequest -> 429
  // Bound on the tokens of all waiting sequences (preempted ones count with prompt + outputs).
  // Both waiting bounds only gate AddRequest: preemption always re-queues.
  int64_t max_waiting_prompt_tokens = 1 << 20;
  bool enable_chunked_prefill = true;
  int32_t block_size = 16;  // tokens per KV block
  int32_t num_blocks = 0;   // KV pool size, set from the memory left after weights
  bool enable_prefix_caching = true;
  // For tests only: the prefix-cache hash (nullptr = DefaultBlockHash).
  BlockHashFn block_hash_fn = nullptr;
};

struct SequenceSpec {
  SeqId id = 0;
  std::vector<int32_t> prompt_tokens;
  int32_t max_new_tokens = 0;
  int32_t priority = 0;  // lower runs first; FCFS within a priority
  // Compute every prompt position (no prefix-cache hits): the caller wants all prompt logits.
  // Until Scheduler::PromptRowsDone.
  bool skip_prefix_cache = false;
  // Most prefill tokens of capped sequences (those with max_chunk_tokens > 0) in one step,
  // together; 0 = the token budget alone. Bounds the logit rows of steps that hold requests
  // wanting every prompt row (prompt logprobs). Capped sequences share the first one's cap
  // (callers give them one value). Ignored with chunked prefill off (a prefill then runs in
  // one step). Until Scheduler::PromptRowsDone.
  int32_t max_chunk_tokens = 0;
  // A later step of work already admitted (a beam search's rounds after its first): the waiting
  // bounds, which refuse new work under overload, do not apply (as preemption always re-queues).
  bool bypass_waiting_limits = false;
};

// One sequence's work in a step: compute tokens [num_computed, num_computed + num_new) of
// Scheduler::Tokens(id), writing their KV into the slots given by block_table.
struct ScheduledSeq {
  SeqId id = 0;
  int32_t num_computed = 0;  // tokens whose KV is already in the cache before this step
  int32_t num_new = 0;       // tokens computed this step (>= 1)
  bool is_prefill = false;   // part of a (re)prefill rather than a one-token decode
  bool sample = false;       // this chunk reaches the last known token: sample one token
  int32_t num_cached = 0;    // on admission: leading tokens found in the prefix cache
  // Speculative decoding (decode entries only): guessed tokens after the known ones, computed
  // this step at positions [num_computed + num_new, + draft_tokens.size()) so that one step can
  // verify them all. Their KV counts as computed only for the drafts the engine accepts.
  std::vector<int32_t> draft_tokens;
  // A copy, covering at least num_computed + num_new + draft_tokens.size() tokens. Stays
  // meaningful after a Cancel: freed blocks are not handed out again before the next Schedule().
  std::vector<int32_t> block_table;
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;  // running sequences first, then newly admitted ones
  std::vector<SeqId> preempted;    // moved back to waiting this step (their KV was dropped)
  int32_t num_prefill_tokens = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;  // prefix-cache hits of the sequences admitted this step
  int32_t num_draft_tokens = 0;          // draft tokens to verify (also in num_decode_tokens)
  bool empty() const { return seqs.empty(); }
};

struct SeqOutput {
  SeqId id = 0;
  absl::optional<int32_t> token;  // the sampled token, for plan entries with sample == true
  bool finished = false;          // the engine's stop rules fired: forget the sequence
  // Emitted before `token`: the leading draft tokens the engine verified (sampled the same token
  // where the draft guessed it), 0 to draft_tokens.size().
  int32_t accepted_drafts = 0;
};

// Proposes up to `max_tokens` draft tokens to follow `tokens` (sequence `id`'s prompt and
// outputs); may return fewer or none. Called by Schedule() on the engine thread.
using DraftFn = std::function<std::vector<int32_t>(SeqId id, absl::Span<const int32_t> tokens,
                                                   int32_t max_tokens)>;

struct SchedulerStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t waiting_tokens = 0;
  int64_t blocks_used = 0;
  int64_t blocks_total = 0;
  int64_t num_preemptions = 0;  // cumulative
  int64_t prefix_cache_queries_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t cached_block_evictions = 0;
};

// Scheduler: FCFS within priority, one token budget per step (vLLM V1 style).
//
// Schedule(): running sequences first, in (priority, arrival) order: each gets its decode token,
// or the next chunk of its prefill. If a running sequence cannot get a KV block, the
// lowest-priority / newest running sequence is preempted by RECOMPUTE (blocks freed, put at the
// front of its priority class in the waiting queue, its prompt + outputs so far becoming its new
// prefill) until the block fits or the sequence preempted itself. Then, if nothing was preempted
// this step, waiting sequences are admitted in order while the token budget, max_num_seqs and the
// free blocks allow: one that does not fit stops admission (nobody passes it), except a capped
// sequence (max_chunk_tokens) whose step allowance of capped rows is spent, which keeps its place
// while those behind it are admitted (so prompt-logprob requests do not hold up the others).
// Prefix-cache hits are skipped, so they cost neither budget nor compute. Block pressure never
// fails a request: AddRequest rejects up front whatever could not run alone on the whole pool.
//
// Invariants (CheckInvariants): every known sequence is in exactly one of waiting / running;
// running sequences, and only they, have a block table, covering at least num_computed tokens;
// waiting sequences have num_computed == 0; outputs never exceed max_new_tokens; the waiting
// token count matches; the block manager's own invariants hold.
//
// Thread-safety: not thread-safe; owned by the engine-loop thread. Callers on other threads
// (e.g. RPC handlers cancelling) must hand their requests to that thread.
class Scheduler {
 public:
  // Validates the config (positive sizes, budgets).
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Nothing changes on error:
  //   InvalidArgument: empty prompt, max_new_tokens < 1, prompt + max_new_tokens over
  //     max_total_tokens, more blocks than the whole pool, (chunked prefill off) a possible
  //     prefill longer than max_num_batched_tokens, or (not for spec.bypass_waiting_limits) a
  //     prompt over max_waiting_prompt_tokens, which no queue could ever hold; the message names
  //     the limit and the numbers.
  //   ResourceExhausted: the waiting queue is full (max_waiting_requests or
  //     max_waiting_prompt_tokens; not for spec.bypass_waiting_limits); the server maps it to
  //     429 / RESOURCE_EXHAUSTED.
  //   AlreadyExists: the id is already known.
  absl::Status AddRequest(const SequenceSpec& spec);
  // AddRequest's InvalidArgument checks alone, for `prompt` tokens and `max_new_tokens`: OK
  // when such a request could run (a caller that submits the work in pieces checks the whole).
  // bypass_waiting_limits: as SequenceSpec's (no max_waiting_prompt_tokens check).
  absl::Status CheckFits(int64_t prompt, int32_t max_new_tokens,
                         bool bypass_waiting_limits = false) const;
  // OK when the waiting queue has room for `requests` more of `tokens` tokens together now,
  // else ResourceExhausted as AddRequest's (for work admitted once and queued in pieces later).
  absl::Status CheckWaitingRoom(int64_t requests, int64_t tokens) const;

  // Plans one step and allocates the KV blocks the plan writes. Nothing writes into blocks that
  // another live sequence reads: shared (prefix-cached) blocks are full and already computed.
  // With `propose_draft`, each running decode entry may carry draft tokens (speculative
  // decoding): at most max_new_tokens - outputs - 1 of them (every accepted draft and the token
  // sampled after them must fit the request's bound) and what the token budget leaves after one
  // token for each running sequence after it (drafts are guesses: they never displace another
  // sequence's real token); drafts never preempt anything: they are cut to the slots of the
  // entry's blocks and of the free blocks the running sequences after it do not need for their
  // own tokens.
  StepPlan Schedule(const DraftFn& propose_draft = nullptr);

  // Closes the step: advances computed counts (by num_new, plus the accepted drafts), registers
  // newly full blocks in the prefix cache, appends accepted drafts and sampled tokens, and
  // forgets (freeing its blocks at once) every sequence whose output says finished. Entries and
  // outputs of sequences cancelled since Schedule() are ignored. The engine decides stops, but
  // the scheduler enforces the request's bound: a sequence with max_new_tokens outputs that is
  // not marked finished is forgotten anyway.
  // Returns InvalidArgument (naming each sequence) if the engine broke the contract; the state
  // stays consistent: a sample == true entry with neither token nor finished, accepted_drafts
  // outside [0, draft_tokens.size()], a token beyond max_new_tokens or reaching it unfinished
  // -> that sequence is forgotten; a token for an entry that does not sample, a duplicate
  // output, or an output for a live sequence not in the plan -> ignored.
  absl::Status Update(const StepPlan& plan, absl::Span<const SeqOutput> outputs);

  // Forgets a waiting or running sequence and frees its blocks now. False if unknown.
  bool Cancel(SeqId id);
  // `id`'s prompt rows are no longer wanted: lifts its max_chunk_tokens and skip_prefix_cache, so
  // that a recompute after a preemption runs at the token budget's pace and reuses the prefix
  // cache (its own blocks, if still cached). No-op for an unknown id.
  void PromptRowsDone(SeqId id);

  // Prompt + outputs so far; empty for an unknown id. Valid until the next mutating call.
  absl::Span<const int32_t> Tokens(SeqId id) const;
  int32_t NumPromptTokens(SeqId id) const;  // 0 if unknown
  int32_t NumOutputTokens(SeqId id) const;  // 0 if unknown
  bool Contains(SeqId id) const { return seqs_.contains(id); }
  bool IsRunning(SeqId id) const;

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }
  const BlockManager& block_manager() const { return blocks_; }

  absl::Status CheckInvariants() const;

 private:
  struct Sequence {
    SeqId id = 0;
    std::vector<int32_t> tokens;  // prompt + outputs
    int32_t num_prompt = 0;
    int32_t max_new_tokens = 0;
    int32_t priority = 0;
    int64_t arrival = 0;      // AddRequest order; orders the running set
    int64_t queue_order = 0;  // waiting order within the priority; < 0 once preempted (front)
    int32_t num_computed = 0;
    int32_t prefill_len = 0;  // tokens.size() when last admitted: below it we are prefilling
    bool running = false;
    bool skip_prefix_cache = false;
    int32_t max_chunk_tokens = 0;  // SequenceSpec's
  };
  // (priority, queue_order, id): std::set gives the waiting order and O(log n) cancel.
  using WaitKey = std::tuple<int32_t, int64_t, SeqId>;

  explicit Scheduler(const SchedulerConfig& config);

  static WaitKey KeyOf(const Sequence& s) { return {s.priority, s.queue_order, s.id}; }
  void PushWaiting(Sequence* s);
  void EraseWaiting(Sequence* s);
  void InsertRunning(Sequence* s);
  void EraseRunning(Sequence* s);
  void Preempt(Sequence* s);
  void Forget(Sequence* s);

  const SchedulerConfig config_;
  BlockManager blocks_;
  absl::flat_hash_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::set<WaitKey> waiting_;
  // Sorted by (priority, arrival): scheduled front to back, preempted from the back.
  std::vector<Sequence*> running_;
  int64_t waiting_tokens_ = 0;
  int64_t next_arrival_ = 0;
  int64_t next_front_order_ = -1;  // decreasing: each preempted sequence goes before all others
  int64_t num_preemptions_ = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SCHEDULER_SCHEDULER_H_
