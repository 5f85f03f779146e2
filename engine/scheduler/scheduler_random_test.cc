// Randomized end-to-end test (fixed seeds): hundreds of requests with shared prefixes, random
// lengths, arrivals, priorities and cancellations on a KV pool small enough to force preemption.
//
// The fake model simulates the KV cache: the "KV" of position p is a hash of tokens[0..p], written
// into slot table[p / block_size] * block_size + p % block_size, and every step "attends" to all
// earlier positions through the block table, checking each slot holds the right value. The sampled
// token is derived from the KV of the last position, so a wrong cache hit, a block overwritten by
// another sequence or a stale slot changes the output and is caught against the expected
// sequence, which is computed directly from the prompt.
//
// With speculation (Case::speculate) decode entries get drafts, some right for a while and then
// wrong: the fake model writes their KV and verifies them as the engine does (row r's token must
// equal draft r to go on), so a rejected draft's KV that is read later or enters the prefix cache
// is caught the same way.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

constexpr int32_t kVocab = 1000;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

// KV value of every position: depends on all tokens up to and including it.
std::vector<uint64_t> PrefixHashes(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> out(tokens.size());
  uint64_t h = 0x1234;
  for (size_t p = 0; p < tokens.size(); ++p) out[p] = h = Mix(h, static_cast<uint64_t>(tokens[p]));
  return out;
}

int32_t NextToken(uint64_t last_kv) { return static_cast<int32_t>(Mix(last_kv, 0xabc) % kVocab); }

std::vector<int32_t> ExpectedOutputs(const std::vector<int32_t>& prompt, int32_t max_new) {
  std::vector<int32_t> tokens = prompt;
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < max_new) {
    const int32_t t = NextToken(PrefixHashes(tokens).back());
    out.push_back(t);
    tokens.push_back(t);
  }
  return out;
}

// A deliberately terrible hash: constant collisions between different contents.
uint64_t WeakHash(uint64_t parent, absl::Span<const int32_t> tokens) {
  return (parent + static_cast<uint64_t>(tokens[0])) % 5;
}

// Worse: ignores the parent, so equal blocks after different prefixes always share a key.
uint64_t ParentBlindHash(uint64_t, absl::Span<const int32_t> tokens) {
  return static_cast<uint64_t>(tokens[0]) % 3;
}

struct Req {
  SeqId id = 0;
  std::vector<int32_t> prompt;
  int32_t max_new = 0;
  int32_t priority = 0;
  int32_t max_chunk_tokens = 0;  // some requests capped (prompt logprobs)
  int arrival_step = 0;
  int cancel_step = -1;     // -1: never cancelled
  bool cancel_mid = false;  // between Schedule and Update (after the model ran)
  std::vector<int32_t> expected;
  // Progress.
  bool added = false;
  bool done = false;
  bool cancelled = false;
  int32_t computed = -1;  // -1: not running (waiting or not yet added)
  std::vector<int32_t> outputs;
};

struct Case {
  std::string name;
  SchedulerConfig config;
  uint32_t seed;
  bool expect_preemption;
  bool speculate = false;
};

class SchedulerRandomTest : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerRandomTest, EveryRequestGetsItsExactTokens) {
  const Case& tc = GetParam();
  const SchedulerConfig& config = tc.config;
  const int32_t bs = config.block_size;
  std::mt19937 rng(tc.seed);
  auto uniform = [&rng](int lo, int hi) {  // inclusive
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };

  // Requests: half extend one of a few shared prefixes, some repeat an earlier prompt exactly.
  std::vector<std::vector<int32_t>> families(6);
  for (auto& f : families) {
    f.resize(static_cast<size_t>(uniform(8, 80)));
    for (auto& t : f) t = uniform(0, kVocab - 1);
  }
  std::vector<std::vector<int32_t>> segments(4, std::vector<int32_t>(16));
  for (auto& seg : segments) {
    for (auto& t : seg) t = uniform(0, kVocab - 1);
  }
  constexpr int kNumRequests = 320;
  std::vector<Req> reqs(kNumRequests);
  for (int i = 0; i < kNumRequests; ++i) {
    Req& r = reqs[i];
    r.id = 1000 + i;
    const int kind = uniform(0, 9);
    if (kind < 5) {
      r.prompt = families[static_cast<size_t>(uniform(0, 5))];
      const int suffix = uniform(0, 60);
      for (int k = 0; k < suffix; ++k) r.prompt.push_back(uniform(0, kVocab - 1));
    } else if (kind < 6 && i > 0) {
      r.prompt = reqs[static_cast<size_t>(uniform(0, i - 1))].prompt;
    } else if (kind < 8) {
      // Block-aligned segments in random order: the same block content after different parents.
      const int n = uniform(1, 6);
      for (int k = 0; k < n; ++k) {
        const auto& seg = segments[static_cast<size_t>(uniform(0, 3))];
        r.prompt.insert(r.prompt.end(), seg.begin(), seg.end());
      }
      const int tail = uniform(0, 10);
      for (int k = 0; k < tail; ++k) r.prompt.push_back(uniform(0, kVocab - 1));
    } else {
      r.prompt.resize(static_cast<size_t>(uniform(1, 150)));
      for (auto& t : r.prompt) t = uniform(0, kVocab - 1);
    }
    if (r.prompt.empty()) r.prompt.push_back(7);
    const int room = config.max_total_tokens - static_cast<int>(r.prompt.size());
    r.max_new = uniform(1, std::max(1, std::min(48, room)));
    r.priority = uniform(0, 2);
    if (uniform(0, 4) == 0) r.max_chunk_tokens = uniform(1, 24);
    r.arrival_step = uniform(0, 400);
    if (uniform(0, 9) == 0) {
      r.cancel_step = r.arrival_step + uniform(0, 60);
      r.cancel_mid = uniform(0, 1) == 1;
    }
    r.expected = ExpectedOutputs(r.prompt, r.max_new);
  }

  auto created = Scheduler::Create(config);
  ASSERT_TRUE(created.ok()) << created.status();
  Scheduler& sched = **created;
  std::map<SeqId, Req*> by_id;
  for (Req& r : reqs) by_id[r.id] = &r;
  std::vector<uint64_t> kv(static_cast<size_t>(config.num_blocks) * bs, 0);  // 0 = garbage

  int64_t rejected_429 = 0;
  int64_t num_cancelled = 0;
  int64_t num_drafted = 0, num_accepted = 0;
  // Drafts: none half the time, else the true continuation for a random length, then noise.
  const DraftFn propose = [&](SeqId id, absl::Span<const int32_t> tokens, int32_t max_tokens) {
    std::vector<int32_t> draft;
    const Req& r = *by_id.at(id);
    EXPECT_EQ(tokens.size(), r.prompt.size() + r.outputs.size()) << id;
    EXPECT_LE(max_tokens, r.max_new - static_cast<int32_t>(r.outputs.size()) - 1) << id;
    if (uniform(0, 1) == 0) return draft;
    const int32_t length = uniform(1, max_tokens);
    const int32_t good = uniform(0, length);
    for (int32_t i = 0; i < length; ++i) {
      const size_t next = r.outputs.size() + static_cast<size_t>(i);
      draft.push_back(i < good && next < r.expected.size() ? r.expected[next]
                                                           : uniform(0, kVocab - 1));
    }
    return draft;
  };
  int64_t max_running = 0;
  auto cancel = [&](Req& r) {
    if (r.done || r.cancelled) return;
    EXPECT_EQ(sched.Cancel(r.id), r.added) << r.id;
    r.cancelled = true;
    r.computed = -1;
    ++num_cancelled;
  };

  int step = 0;
  for (; step < 20000; ++step) {
    // Arrivals (a 429 is retried next step, as a client would).
    for (Req& r : reqs) {
      if (r.added || r.cancelled || r.arrival_step > step) continue;
      SequenceSpec spec{r.id, r.prompt, r.max_new, r.priority};
      spec.max_chunk_tokens = r.max_chunk_tokens;
      absl::Status st = sched.AddRequest(spec);
      if (st.code() == absl::StatusCode::kResourceExhausted) {
        ++rejected_429;
        continue;
      }
      ASSERT_TRUE(st.ok()) << st;
      r.added = true;
    }
    for (Req& r : reqs) {
      if (r.cancel_step == step && !r.cancel_mid) cancel(r);
    }
    ASSERT_TRUE(sched.CheckInvariants().ok()) << sched.CheckInvariants();
    const bool all_settled =
        std::all_of(reqs.begin(), reqs.end(), [](const Req& r) { return r.done || r.cancelled; });
    if (all_settled) break;
    const bool had_work = sched.HasWork();

    StepPlan plan = sched.Schedule(tc.speculate ? propose : DraftFn());
    ASSERT_TRUE(sched.CheckInvariants().ok()) << sched.CheckInvariants();
    if (had_work) {
      ASSERT_FALSE(plan.empty()) << "no progress at step " << step;
    }
    for (SeqId id : plan.preempted) by_id.at(id)->computed = -1;
    max_running = std::max<int64_t>(max_running, static_cast<int64_t>(sched.num_running()));

    // Plan-level limits.
    int32_t total_new = 0, total_drafts = 0, capped_prefill = 0;
    for (const ScheduledSeq& e : plan.seqs) {
      total_new += e.num_new;
      total_drafts += static_cast<int32_t>(e.draft_tokens.size());
      const int32_t cap = by_id.at(e.id)->max_chunk_tokens;
      if (cap > 0 && e.is_prefill && config.enable_chunked_prefill) capped_prefill += e.num_new;
    }
    // Capped prefills share one cap a step (the first capped sequence's; the engine gives them
    // all the same; here they differ, so bound by the largest, 24).
    ASSERT_LE(capped_prefill, 24) << "step " << step;
    ASSERT_LE(total_new + total_drafts, config.max_num_batched_tokens);
    ASSERT_EQ(total_new + total_drafts, plan.num_prefill_tokens + plan.num_decode_tokens);
    ASSERT_EQ(total_drafts, plan.num_draft_tokens);
    num_drafted += total_drafts;
    ASSERT_LE(static_cast<int32_t>(plan.seqs.size()), config.max_num_seqs);

    // Which blocks live sequences hold right now: a written block must belong to one only.
    std::map<int32_t, int> holders;
    for (const Req& r : reqs) {
      if (!r.added || r.done || r.cancelled || !sched.IsRunning(r.id)) continue;
      for (int32_t b : sched.block_manager().BlockTable(r.id)) ++holders[b];
    }

    // The fake model.
    std::set<int64_t> written;
    std::vector<SeqOutput> outputs;
    for (const ScheduledSeq& e : plan.seqs) {
      Req& r = *by_id.at(e.id);
      ASSERT_FALSE(r.done || r.cancelled) << e.id;
      std::vector<int32_t> tokens = r.prompt;
      tokens.insert(tokens.end(), r.outputs.begin(), r.outputs.end());
      const absl::Span<const int32_t> sched_tokens = sched.Tokens(e.id);
      ASSERT_EQ(std::vector<int32_t>(sched_tokens.begin(), sched_tokens.end()), tokens) << e.id;
      const int32_t end = e.num_computed + e.num_new;
      const int32_t num_draft = static_cast<int32_t>(e.draft_tokens.size());
      ASSERT_GE(e.num_new, 1);
      if (num_draft > 0) {
        ASSERT_TRUE(e.sample && !e.is_prefill && e.num_new == 1) << e.id;
        ASSERT_LE(num_draft, r.max_new - static_cast<int32_t>(r.outputs.size()) - 1) << e.id;
      }
      ASSERT_LE(end, static_cast<int32_t>(tokens.size())) << e.id;
      ASSERT_EQ(e.sample, end == static_cast<int32_t>(tokens.size())) << e.id;
      if (r.computed >= 0) {
        ASSERT_EQ(e.num_computed, r.computed) << "positions not contiguous for " << e.id;
      } else {
        ASSERT_EQ(e.num_computed % bs, 0) << e.id;  // a fresh start or whole cached blocks
        ASSERT_TRUE(e.is_prefill);
      }
      ASSERT_GE(static_cast<int64_t>(e.block_table.size()) * bs, end + num_draft) << e.id;
      std::vector<int32_t> with_drafts = tokens;
      with_drafts.insert(with_drafts.end(), e.draft_tokens.begin(), e.draft_tokens.end());
      const std::vector<uint64_t> truth = PrefixHashes(with_drafts);
      auto slot = [&](int32_t p) {
        return static_cast<int64_t>(e.block_table[static_cast<size_t>(p / bs)]) * bs + p % bs;
      };
      // Attention over earlier positions: cached or computed before, they must be intact.
      for (int32_t q = 0; q < e.num_computed; ++q) {
        ASSERT_EQ(kv[static_cast<size_t>(slot(q))], truth[q])
            << "seq " << e.id << " reads wrong KV at position " << q << " (step " << step << ")";
      }
      for (int32_t p = e.num_computed; p < end + num_draft; ++p) {
        const int32_t block = e.block_table[static_cast<size_t>(p / bs)];
        ASSERT_EQ(holders[block], 1) << "seq " << e.id << " writes shared block " << block;
        ASSERT_FALSE(sched.block_manager().IsCached(block)) << "write into cached block " << block;
        ASSERT_TRUE(written.insert(slot(p)).second) << "slot written twice in step " << step;
        kv[static_cast<size_t>(slot(p))] = truth[p];
      }
      if (e.sample) {
        // Round k samples the row of position end - 1 + k; it goes on while the token is the
        // draft's (and the request is not done).
        SeqOutput out;
        out.id = e.id;
        for (int32_t k = 0;; ++k) {
          const int32_t token = NextToken(kv[static_cast<size_t>(slot(end - 1 + k))]);
          const size_t index = r.outputs.size() + static_cast<size_t>(k);
          ASSERT_LT(index, r.expected.size()) << e.id;
          ASSERT_EQ(token, r.expected[index]) << "seq " << e.id << " output " << index;
          out.token = token;
          out.accepted_drafts = k;
          out.finished = index + 1 == r.expected.size();
          if (out.finished || k == num_draft || token != e.draft_tokens[static_cast<size_t>(k)]) {
            break;
          }
        }
        num_accepted += out.accepted_drafts;
        outputs.push_back(out);
      }
    }

    // Cancels that race with the step.
    for (Req& r : reqs) {
      if (r.cancel_step == step && r.cancel_mid) cancel(r);
    }
    absl::Status st = sched.Update(plan, outputs);
    ASSERT_TRUE(st.ok()) << st;
    for (const ScheduledSeq& e : plan.seqs) {
      Req& r = *by_id.at(e.id);
      if (r.cancelled) continue;
      r.computed = e.num_computed + e.num_new;
    }
    for (const SeqOutput& o : outputs) {
      Req& r = *by_id.at(o.id);
      if (r.cancelled) continue;
      const ScheduledSeq& e = *std::find_if(plan.seqs.begin(), plan.seqs.end(),
                                            [&](const ScheduledSeq& x) { return x.id == o.id; });
      r.outputs.insert(r.outputs.end(), e.draft_tokens.begin(),
                       e.draft_tokens.begin() + o.accepted_drafts);
      r.computed += o.accepted_drafts;
      r.outputs.push_back(*o.token);
      if (o.finished) {
        r.done = true;
        r.computed = -1;
        ASSERT_FALSE(sched.Contains(r.id));
      }
    }
    ASSERT_TRUE(sched.CheckInvariants().ok()) << sched.CheckInvariants();
  }
  ASSERT_LT(step, 20000) << "did not finish";

  int finished = 0;
  for (const Req& r : reqs) {
    if (r.cancelled) continue;
    ASSERT_TRUE(r.done) << r.id;
    EXPECT_EQ(r.outputs, r.expected) << r.id;
    ++finished;
  }
  EXPECT_FALSE(sched.HasWork());
  EXPECT_EQ(sched.num_running(), 0u);
  EXPECT_EQ(sched.num_waiting(), 0u);
  const SchedulerStats stats = sched.stats();
  EXPECT_EQ(stats.blocks_used, 0);
  EXPECT_EQ(sched.block_manager().num_free_blocks(), config.num_blocks);
  EXPECT_GE(num_cancelled, 10);
  EXPECT_GE(finished, 250);
  if (tc.expect_preemption) {
    EXPECT_GT(stats.num_preemptions, 0);
  }
  if (tc.speculate) {
    EXPECT_GT(num_accepted, 100);
    EXPECT_GT(num_drafted, num_accepted);  // some drafts were rejected, too
  } else {
    EXPECT_EQ(num_drafted, 0);
  }
  if (config.enable_prefix_caching) {
    EXPECT_GT(stats.prefix_cache_hit_tokens, 0);
  } else {
    EXPECT_EQ(stats.prefix_cache_hit_tokens, 0);
  }
  ASSERT_TRUE(sched.CheckInvariants().ok()) << sched.CheckInvariants();
  std::printf(
      "%s: %d steps, %d finished, %lld cancelled, %lld preemptions, %lld/%lld prefix "
      "tokens hit, %lld evictions, %lld 429s, max running %lld, drafts %lld accepted of %lld\n",
      tc.name.c_str(), step, finished, static_cast<long long>(num_cancelled),
      static_cast<long long>(stats.num_preemptions),
      static_cast<long long>(stats.prefix_cache_hit_tokens),
      static_cast<long long>(stats.prefix_cache_queries_tokens),
      static_cast<long long>(stats.cached_block_evictions), static_cast<long long>(rejected_429),
      static_cast<long long>(max_running), static_cast<long long>(num_accepted),
      static_cast<long long>(num_drafted));
}

SchedulerConfig Base() {
  SchedulerConfig c;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 256;
  c.max_total_tokens = 256;
  c.max_waiting_requests = 64;
  c.block_size = 16;
  c.num_blocks = 40;  // 640 tokens: a handful of long requests fill it
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::string s = std::to_string(seed);
    SchedulerConfig c = Base();
    cases.push_back({"chunked_cache_" + s, c, seed, true});

    c = Base();
    c.enable_prefix_caching = false;
    cases.push_back({"chunked_nocache_" + s, c, seed, true});

    c = Base();
    c.enable_chunked_prefill = false;
    c.max_num_batched_tokens = 512;
    cases.push_back({"unchunked_cache_" + s, c, seed, true});

    c = Base();
    c.block_size = 4;
    c.num_blocks = 150;
    c.max_num_batched_tokens = 48;  // many chunks
    c.max_num_seqs = 8;
    c.max_waiting_prompt_tokens = 4000;
    cases.push_back({"small_blocks_tiny_budget_" + s, c, seed, false});

    c = Base();
    c.block_hash_fn = &WeakHash;
    cases.push_back({"colliding_hash_" + s, c, seed, true});

    c = Base();
    c.block_size = 4;
    c.num_blocks = 160;
    c.block_hash_fn = &ParentBlindHash;
    cases.push_back({"parent_blind_hash_" + s, c, seed, true});

    c = Base();
    cases.push_back({"speculative_cache_" + s, c, seed, true, /*speculate=*/true});

    c = Base();
    c.block_size = 4;
    c.num_blocks = 150;
    c.max_num_batched_tokens = 48;
    c.max_num_seqs = 8;
    c.max_waiting_prompt_tokens = 4000;
    cases.push_back({"speculative_small_blocks_" + s, c, seed, false, /*speculate=*/true});

    c = Base();
    c.block_size = 4;
    c.num_blocks = 160;
    c.block_hash_fn = &WeakHash;
    cases.push_back({"speculative_colliding_hash_" + s, c, seed, true, /*speculate=*/true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerRandomTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace blossom
