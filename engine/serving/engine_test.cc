// The serving engine end to end on the CPU backend with a golden fixture model.
#include "engine/serving/engine.h"
#include "engine/serving/engine_test_util.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/generate/batch_generator.h"
#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = engine_testing::TinyModel::Load().release();
    // The offline reference gets its own model and KV cache: an engine owns its runner's cache,
    // and references are computed while engines are alive.
    reference_model_ = engine_testing::TinyModel::Load().release();
    ASSERT_NE(model_, nullptr);
    ASSERT_NE(reference_model_, nullptr);
    runner_ = model_->runner();
    tokenizer_ = model_->tokenizer();
    reference_runner_ = reference_model_->runner();
  }
  static void TearDownTestSuite() {
    delete reference_model_;
    delete model_;
  }

  static std::unique_ptr<Engine> MakeEngine(int32_t num_blocks, int32_t max_seqs = 64,
                                            int32_t max_batched = 256, int32_t max_waiting = 1024,
                                            EngineObserver* observer = nullptr,
                                            ModelRunner* runner = nullptr) {
    EngineConfig config;
    config.scheduler.block_size = 4;
    config.scheduler.num_blocks = num_blocks;
    config.scheduler.max_num_seqs = max_seqs;
    config.scheduler.max_num_batched_tokens = max_batched;
    config.scheduler.max_total_tokens = 256;
    config.scheduler.max_waiting_requests = max_waiting;
    auto engine = Engine::Create(runner != nullptr ? runner : runner_, tokenizer_, config, observer);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  // Reference: the same request run alone through the offline generator.
  static std::vector<int32_t> Alone(const EngineRequest& r) {
    BatchGenerator gen(reference_runner_, tokenizer_);
    GenerateRequest g{r.prompt_tokens, r.sampling, r.stopping};
    auto out = gen.Generate({g});
    EXPECT_TRUE(out.ok()) << out.status();
    return (*out)[0].tokens;
  }

  static std::vector<int32_t> Collect(RequestStream& stream, EngineEvent* last) {
    std::vector<int32_t> tokens;
    EngineEvent e;
    while (stream.Next(&e)) {
      if (e.has_token) tokens.push_back(e.token.token);
      *last = e;
    }
    return tokens;
  }

  static EngineRequest Greedy(std::vector<int32_t> prompt, int32_t n) {
    return engine_testing::GreedyRequest(std::move(prompt), n);
  }

  // 200 requests (greedy, seeded sampling, penalties, shared prefixes) into a KV pool small
  // enough to force preemption, some cancelled mid-stream; every other request must produce
  // exactly its tokens alone, and every block must come back. On `runner` (null: runner_).
  static void Stress(ModelRunner* runner);

  static engine_testing::TinyModel* model_;
  static engine_testing::TinyModel* reference_model_;
  static ModelRunner* runner_;
  static ModelRunner* reference_runner_;
  static Tokenizer* tokenizer_;
};

engine_testing::TinyModel* EngineTest::model_ = nullptr;
engine_testing::TinyModel* EngineTest::reference_model_ = nullptr;
ModelRunner* EngineTest::runner_ = nullptr;
ModelRunner* EngineTest::reference_runner_ = nullptr;
Tokenizer* EngineTest::tokenizer_ = nullptr;

TEST_F(EngineTest, GreedyRequestMatchesOfflineGeneration) {
  auto engine = MakeEngine(64);
  EngineRequest r = Greedy(*tokenizer_->Encode("Hello world, this is"), 20);
  auto stream = engine->Submit(r);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EngineEvent last;
  std::vector<int32_t> tokens = Collect(**stream, &last);
  EXPECT_EQ(tokens, Alone(r));
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  EXPECT_EQ(last.usage.generated_tokens, 20);
  EXPECT_EQ(last.usage.prompt_tokens, static_cast<int32_t>(r.prompt_tokens.size()));
  EXPECT_LE(last.timings.arrival, last.timings.first_scheduled);
  EXPECT_LE(last.timings.first_scheduled, last.timings.first_token);
  EXPECT_LE(last.timings.first_token, last.timings.finished);
  EXPECT_EQ(engine->scheduler_stats().blocks_used, 0) << "blocks released at finish";
}

// usage.cached_prompt_tokens: a repeated prompt reuses its full KV blocks (block size 4) from the
// prefix cache and says how many tokens that was; the first run reused none.
TEST_F(EngineTest, UsageReportsPrefixCacheHits) {
  auto engine = MakeEngine(64);
  EngineRequest r =
      Greedy(*tokenizer_->Encode("The cache keeps the keys and values of the tokens."), 3);
  ASSERT_GE(r.prompt_tokens.size(), 9u);
  std::vector<int32_t> cached;
  std::vector<std::vector<int32_t>> outputs;
  for (int run = 0; run < 2; ++run) {
    auto stream = engine->Submit(r);
    ASSERT_TRUE(stream.ok()) << stream.status();
    EngineEvent last;
    outputs.push_back(Collect(**stream, &last));
    cached.push_back(last.usage.cached_prompt_tokens);
  }
  EXPECT_EQ(cached[0], 0);
  // Whole blocks only, and never the last prompt token (its logits must be computed).
  const int32_t n = static_cast<int32_t>(r.prompt_tokens.size());
  EXPECT_EQ(cached[1], (n - 1) / 4 * 4);
  EXPECT_EQ(outputs[0], outputs[1]);
}

// The engine over a two-rank runner: the scheduler runs once, both ranks run every step, and the
// greedy tokens are those of the single-rank offline run.
TEST_F(EngineTest, TensorParallelRunnerGivesTheSameTokens) {
  ModelRunnerOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.tensor_parallel_size = 2;
  options.threads_per_rank = 1;
  options.prefetch = false;
  auto runner = ModelRunner::Create(options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EngineConfig config;
  config.scheduler.block_size = 4;
  config.scheduler.num_blocks = 64;
  config.scheduler.max_total_tokens = 256;
  auto engine = Engine::Create(runner->get(), tokenizer_, config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<EngineRequest> requests = {Greedy(*tokenizer_->Encode("Hello world, this is"), 16),
                                         Greedy(*tokenizer_->Encode("The quick brown fox"), 12),
                                         Greedy({5, 6, 7, 8, 9, 10, 11}, 20)};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& r : requests) {
    auto stream = (*engine)->Submit(r);
    ASSERT_TRUE(stream.ok()) << stream.status();
    streams.push_back(*stream);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    EngineEvent last;
    EXPECT_EQ(Collect(*streams[i], &last), Alone(requests[i])) << "request " << i;
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  }
}

TEST_F(EngineTest, RejectsBadRequestsAtSubmitWithTheReason) {
  auto engine = MakeEngine(16);
  EngineRequest empty = Greedy({}, 4);
  EXPECT_EQ(engine->Submit(empty).status().code(), absl::StatusCode::kInvalidArgument);
  EngineRequest bad_token = Greedy({1, static_cast<int32_t>(runner_->vocab_size())}, 4);
  auto s = engine->Submit(bad_token).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s;
  EngineRequest bad_top_p = Greedy({5, 6}, 4);
  bad_top_p.sampling.temperature = 1.0f;
  bad_top_p.sampling.top_p = 1.5f;
  s = engine->Submit(bad_top_p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_p"), std::string::npos) << s;
  // Can never fit: 16 blocks of 4 tokens = 64 tokens in the whole pool.
  EngineRequest huge = Greedy(std::vector<int32_t>(60, 7), 40);
  s = engine->Submit(huge).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// A request whose own masks and bans leave no first token could only fail at its first step:
// it is refused at Submit, with the sampler's code, before it waits for a prefill.
TEST_F(EngineTest, RefusesAtSubmitARequestWhoseMasksLeaveNoFirstToken) {
  auto engine = MakeEngine(16);
  EngineRequest banned = Greedy({5, 6}, 4);
  banned.sampling.allowed_token_ids = {9};
  banned.sampling.bad_words_token_ids = {{9}};
  absl::Status s = engine->Submit(banned).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("allowed_token_ids and bad_words"), std::string::npos) << s;
  // Only the end token allowed, but it may not come before min_new_tokens.
  const int32_t eos = runner_->config().eos_token_ids.front();
  EngineRequest only_end = Greedy({5, 6}, 4);
  only_end.stopping.ignore_eos = false;
  only_end.stopping.min_new_tokens = 2;
  only_end.sampling.allowed_token_ids = {eos};
  s = engine->Submit(only_end).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("min_new_tokens"), std::string::npos) << s;
  EXPECT_EQ(engine->num_unfinished(), 0);
  // One token left: admitted, and it is every token.
  EngineRequest one_left = banned;
  one_left.sampling.allowed_token_ids = {9, 10};
  auto stream = engine->Submit(one_left);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EngineEvent last;
  EXPECT_EQ(Collect(**stream, &last), std::vector<int32_t>(4, 10));
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
}

TEST_F(EngineTest, FullQueueIsRefusedWithResourceExhausted) {
  auto engine = MakeEngine(8, /*max_seqs=*/1, /*max_batched=*/8, /*max_waiting=*/2);
  std::vector<std::shared_ptr<RequestStream>> streams;
  int refused = 0;
  for (int i = 0; i < 12; ++i) {
    auto s = engine->Submit(Greedy({5, 6, 7}, 8));
    if (s.ok()) {
      streams.push_back(*s);
    } else {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  for (auto& st : streams) {
    EngineEvent last;
    Collect(*st, &last);
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  }
}

TEST_F(EngineTest, CancelEndsTheStreamAndFreesBlocks) {
  auto engine = MakeEngine(64);
  auto stream = engine->Submit(Greedy({5, 6, 7, 8}, 200));
  ASSERT_TRUE(stream.ok());
  EngineEvent e;
  ASSERT_TRUE((*stream)->Next(&e));  // at least one token
  EXPECT_TRUE(engine->Cancel((*stream)->id()));
  EngineEvent last = e;
  while ((*stream)->Next(&e)) last = e;
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, FinishReason::kCancelled);
  EXPECT_FALSE(engine->Cancel((*stream)->id()));
  EXPECT_EQ(engine->scheduler_stats().blocks_used, 0);
  EXPECT_EQ(engine->num_unfinished(), 0);
}

TEST_F(EngineTest, SeededSamplingIsIndependentOfTheBatch) {
  EngineRequest r = Greedy(*tokenizer_->Encode("Peace is the only way"), 24);
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 50;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 1234;
  std::vector<int32_t> alone = Alone(r);
  auto engine = MakeEngine(128);
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 5; ++i) {
    EngineRequest o = Greedy({static_cast<int32_t>(10 + i), 11, 12}, 10 + i);
    o.sampling.temperature = 1.0f;
    others.push_back(*engine->Submit(o));
  }
  auto mine = engine->Submit(r);
  ASSERT_TRUE(mine.ok());
  EngineEvent last;
  EXPECT_EQ(Collect(**mine, &last), alone);
  for (auto& o : others) Collect(*o, &last);
}

TEST_F(EngineTest, StopStringEndsTheRequestAndIsNotShown) {
  // Find a substring of the greedy continuation and use it as a stop string.
  EngineRequest r = Greedy(*tokenizer_->Encode("The new movie that got"), 30);
  std::vector<int32_t> full = Alone(r);
  std::string text = tokenizer_->Decode(full, true);
  ASSERT_GE(text.size(), 12u);
  std::string stop = text.substr(6, 3);
  r.stopping.stop_strings = {stop};
  auto engine = MakeEngine(64);
  auto stream = engine->Submit(r);
  ASSERT_TRUE(stream.ok());
  std::string shown;
  EngineEvent e, last;
  while ((*stream)->Next(&e)) {
    if (e.has_token) shown += e.token.text_delta;
    last = e;
  }
  EXPECT_EQ(last.finish_reason, FinishReason::kStopString);
  EXPECT_EQ(shown, text.substr(0, text.find(stop)));
}

// Records what the observer hooks report (called on the engine thread).
class RecordingObserver : public EngineObserver {
 public:
  void OnStep(const StepStats& s) override {
    std::lock_guard<std::mutex> lock(mu);
    steps.push_back(s);
  }
  void OnRequestFinished(const EngineEvent& e) override {
    std::lock_guard<std::mutex> lock(mu);
    finished.push_back(e);
  }
  std::mutex mu;
  std::vector<StepStats> steps;
  std::vector<EngineEvent> finished;
};

TEST_F(EngineTest, ObserverSeesEveryStepAndEveryFinishedRequest) {
  RecordingObserver observer;
  {
    auto engine = MakeEngine(64, 64, 256, 1024, &observer);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 3; ++i) streams.push_back(*engine->Submit(Greedy({5, 6, 7, 8, 9}, 6)));
    EngineEvent last;
    for (auto& s : streams) Collect(*s, &last);
  }
  std::lock_guard<std::mutex> lock(observer.mu);
  ASSERT_EQ(observer.finished.size(), 3u);
  int64_t prefill = 0, decode = 0;
  double schedule = 0.0, sample = 0.0, output = 0.0;
  for (const StepStats& s : observer.steps) {
    EXPECT_GT(s.batch_size, 0);
    EXPECT_GE(s.duration_seconds, 0.0);
    // The host parts of the step: each timed (clocks tick in nanoseconds), none negative.
    EXPECT_GE(s.schedule_seconds, 0.0);
    EXPECT_GE(s.sample_seconds, 0.0);
    EXPECT_GE(s.output_seconds, 0.0);
    EXPECT_GE(s.deliver_seconds, 0.0);
    schedule += s.schedule_seconds;
    sample += s.sample_seconds;
    output += s.output_seconds;
    EXPECT_LE(s.blocks_used, s.blocks_total);
    prefill += s.prefill_tokens;
    decode += s.decode_tokens;
  }
  // 3 prompts of 5 tokens, the last 4 shared-prefix-cacheable at most; 5 decode tokens each.
  EXPECT_GE(prefill, 5);
  EXPECT_LE(prefill, 15);
  EXPECT_EQ(decode, 15);
  EXPECT_GT(schedule, 0.0);
  EXPECT_GT(sample, 0.0);
  EXPECT_GT(output, 0.0);
  for (const EngineEvent& e : observer.finished) {
    EXPECT_EQ(e.finish_reason, FinishReason::kLength);
    EXPECT_EQ(e.usage.generated_tokens, 6);
    EXPECT_NE(e.timings.first_token, Clock::time_point{});
  }
}

// Issue 3's randomized stress test: many requests with random lengths and sampling parameters,
// 10% cancelled at random points, a KV pool small enough to force preemption. Every request that
// is not cancelled produces exactly its tokens when run alone; afterwards every block is free.
TEST_F(EngineTest, RandomizedStressWithCancellationAndPreemption) { Stress(nullptr); }

// The same through a runner whose decode steps replay step graphs (the CPU backend's recorded
// op lists): the engine's warm-up captures every bucket, preemption and cancellation change the
// batch between replays, and the tokens are still each request's alone.
TEST_F(EngineTest, RandomizedStressWithStepGraphs) {
  ModelRunnerOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.threads_per_rank = 2;
  options.prefetch = false;
  options.step_graphs = true;
  options.step_graph_options.max_batch = 32;
  options.step_graph_options.max_context = 256;
  auto runner = ModelRunner::Create(options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  Stress(runner->get());
  const StepGraphStats stats = (*runner)->step_graph_stats();
  EXPECT_EQ(stats.captured, 6) << "buckets 1 to 32, captured once at the engine's start";
  EXPECT_GT(stats.replayed, 50);
  EXPECT_EQ(stats.failed, 0);
}

// Events are streamed on the deliverer while the engine thread runs the next steps, at most one
// step's batch waiting behind the one being delivered: with the first token's sink call held,
// steps 2 and 3 still run (step 3's hand-off then waits), no more, and nothing is lost or
// reordered once the sink lets go. The request counts as unfinished until its final event goes.
TEST_F(EngineTest, StreamingRunsWhileTheNextStepsComputeAtMostOneStepBehind) {
  const std::vector<int32_t> want = Alone(Greedy({5, 6, 7, 8, 9}, 6));
  RecordingObserver observer;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, first_seen = false;
  std::vector<int32_t> tokens;
  bool finished = false;
  auto steps_seen = [&] {
    std::lock_guard<std::mutex> lock(observer.mu);
    return observer.steps.size();
  };
  auto engine = MakeEngine(64, 64, 256, 1024, &observer);
  auto stream = engine->Submit(Greedy({5, 6, 7, 8, 9}, 6), [&](const EngineEvent& e) {
    std::unique_lock<std::mutex> lock(mu);
    if (e.has_token) tokens.push_back(e.token.token);
    if (e.finished) finished = true;
    first_seen = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  ASSERT_TRUE(stream.ok()) << stream.status();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return first_seen; }));
  }
  for (int i = 0; i < 10000 && steps_seen() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(steps_seen(), 3u) << "the prefill, then two decode steps while token 1 is held";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(steps_seen(), 3u) << "the engine ran ahead of the deliverer by more than a step";
  EXPECT_EQ(engine->num_unfinished(), 1);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (int i = 0; i < 10000 && engine->num_unfinished() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  engine->Shutdown();  // every event delivered before it returns
  {
    std::lock_guard<std::mutex> lock(observer.mu);
    ASSERT_GE(observer.steps.size(), 4u);
    // Step 3's hand-off waited for the held sink (>= 50 ms above): step 4 reports it.
    EXPECT_GE(observer.steps[3].deliver_seconds, 0.04);
    EXPECT_LT(observer.steps[1].deliver_seconds, 0.04) << "step 1's hand-off had nothing to wait for";
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(finished);
  EXPECT_EQ(tokens, want);
}

void EngineTest::Stress(ModelRunner* runner) {
  std::mt19937 rng(20261121);
  const int kRequests = 200;
  std::vector<EngineRequest> reqs(kRequests);
  std::vector<bool> cancel(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    EngineRequest& r = reqs[i];
    int len = std::uniform_int_distribution<int>(1, 24)(rng);
    for (int t = 0; t < len; ++t)
      r.prompt_tokens.push_back(std::uniform_int_distribution<int>(4, 1500)(rng));
    if (i % 7 == 0 && i > 0) {  // shared prefixes exercise the prefix cache
      r.prompt_tokens = reqs[i - 1].prompt_tokens;
      r.prompt_tokens.push_back(9);
    }
    r.stopping.max_new_tokens = std::uniform_int_distribution<int>(1, 24)(rng);
    r.stopping.ignore_eos = (i % 3) != 0;
    const int kind = i % 4;
    r.sampling.temperature = kind == 0 ? 0.0f : 0.7f + 0.1f * (i % 5);
    if (kind == 2) r.sampling.top_k = 20;
    if (kind == 3) r.sampling.top_p = 0.9f;
    if (i % 5 == 0) r.sampling.repetition_penalty = 1.2f;
    if (i % 6 == 0) r.sampling.presence_penalty = 0.5f;
    r.sampling.seed = 1000 + i;
    cancel[i] = (i % 10) == 3;
  }
  // Expected outputs: each request alone.
  std::vector<std::vector<int32_t>> expected(kRequests);
  for (int i = 0; i < kRequests; ++i)
    if (!cancel[i]) expected[i] = Alone(reqs[i]);

  // 48 tokens of prompt+output at most per request, 4-token blocks: 40 blocks force preemption.
  auto engine = MakeEngine(/*num_blocks=*/40, /*max_seqs=*/32, /*max_batched=*/64,
                           /*max_waiting=*/1024, /*observer=*/nullptr, runner);
  std::vector<std::shared_ptr<RequestStream>> streams(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    auto s = engine->Submit(reqs[i]);
    ASSERT_TRUE(s.ok()) << i << ": " << s.status();
    streams[i] = *s;
  }
  // Consumers: cancel the chosen ones after a random number of events.
  std::vector<std::vector<int32_t>> got(kRequests);
  std::vector<FinishReason> reasons(kRequests);
  std::vector<std::thread> consumers;
  for (int c = 0; c < 4; ++c) {
    consumers.emplace_back([&, c] {
      std::mt19937 local(c);
      for (int i = c; i < kRequests; i += 4) {
        int cancel_after = cancel[i] ? std::uniform_int_distribution<int>(0, 3)(local) : -1;
        if (cancel_after == 0) engine->Cancel(streams[i]->id());
        EngineEvent e;
        int n = 0;
        while (streams[i]->Next(&e)) {
          if (e.has_token) got[i].push_back(e.token.token);
          if (e.finished) reasons[i] = e.finish_reason;
          if (++n == cancel_after) engine->Cancel(streams[i]->id());
        }
      }
    });
  }
  for (auto& t : consumers) t.join();
  int cancelled = 0;
  for (int i = 0; i < kRequests; ++i) {
    if (cancel[i]) {
      // Either cancelled, or it finished before the cancel arrived.
      if (reasons[i] == FinishReason::kCancelled) ++cancelled;
      continue;
    }
    EXPECT_EQ(got[i], expected[i]) << "request " << i;
    EXPECT_NE(reasons[i], FinishReason::kNone) << "request " << i;
  }
  SchedulerStats stats = engine->scheduler_stats();
  EXPECT_GT(stats.num_preemptions, 0) << "the pool should be small enough to force preemption";
  EXPECT_GT(cancelled, 0);
  EXPECT_EQ(stats.blocks_used, 0);
  EXPECT_EQ(stats.running + stats.waiting, 0);
  EXPECT_EQ(engine->num_unfinished(), 0);
  std::cerr << "preemptions " << stats.num_preemptions << ", cancelled " << cancelled
            << ", prefix-cache hit tokens " << stats.prefix_cache_hit_tokens << "\n";
}

}  // namespace
}  // namespace blossom
