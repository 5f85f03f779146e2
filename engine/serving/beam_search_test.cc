// Beam search through the engine against Hugging Face's generate(num_beams=...) on the fixture
// models (tests/fixtures/goldens/*/beam_search.json, written by tests/fixtures/fixture_beam.py),
// and the search's life in a serving engine: cancellation, refusals, the prefix cache's savings,
// searches alongside ordinary requests.
#include "engine/serving/beam_search.h"

#include <atomic>
#include <cmath>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/serving/beam_search_test_util.h"
#include "engine/serving/engine.h"
#include "engine/serving/engine_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

using beam_testing::ExpectGoldenCase;
using beam_testing::LoadGoldens;
using beam_testing::OutcomeWaiter;
using beam_testing::Search;
using engine_testing::GreedyRequest;
using engine_testing::TinyModel;

std::unique_ptr<Engine> MakeEngine(TinyModel& model, bool prefix_caching = true,
                                   EngineObserver* observer = nullptr) {
  EngineConfig config;
  config.kv_cache_bytes = 16 << 20;
  config.scheduler.enable_prefix_caching = prefix_caching;
  auto engine = Engine::Create(model.runner(), model.tokenizer(), config, observer);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

class BeamSearchGoldenTest : public ::testing::TestWithParam<std::string> {};

// Every case's returned sequences equal HF's, token for token, and their summed logprobs agree
// to 1e-5 a token (HF's log-softmax and ours round differently in the last bits; a reordering
// would show as different tokens). With prefix caching on and off.
TEST_P(BeamSearchGoldenTest, SequencesAndScoresAreHuggingFaces) {
  const nlohmann::json golden = LoadGoldens(GetParam());
  ASSERT_FALSE(golden.is_discarded());
  auto model = TinyModel::Load(GetParam());
  ASSERT_NE(model, nullptr);
  for (bool prefix_caching : {true, false}) {
    std::unique_ptr<Engine> engine = MakeEngine(*model, prefix_caching);
    ASSERT_NE(engine, nullptr);
    int case_index = 0;
    for (const nlohmann::json& c : golden["cases"]) {
      SCOPED_TRACE(testing::Message() << GetParam() << " case " << case_index++
                                      << " prefix_caching=" << prefix_caching);
      // HF's log-softmax and ours differ as the logits do (up to 2e-6 seen on these models;
      // the model's contract is 1e-4): 1e-5 a token.
      ExpectGoldenCase(engine.get(), c, 1e-5);
    }
    EXPECT_EQ(engine->num_unfinished(), 0);
    EXPECT_EQ(engine->scheduler_stats().blocks_used, 0);
  }
}

// Every case records how close its answer came to another (fixture_beam_margin.py), and the
// goldens stay useful to the CUDA test, which compares only the cases that no per-token error
// under 4e-5 (the GPU's) could decide otherwise: at most two a model are closer than that
// (bloom-tiny-h4's cases 17 and 19, 9.5e-7 a token at their eighth step).
TEST_P(BeamSearchGoldenTest, MostCasesAreDecidedBeyondTheGpusError) {
  const nlohmann::json golden = LoadGoldens(GetParam());
  ASSERT_FALSE(golden.is_discarded());
  int cases = 0, decided = 0;
  for (const nlohmann::json& c : golden["cases"]) {
    SCOPED_TRACE(testing::Message() << GetParam() << " case " << cases);
    ++cases;
    if (beam_testing::DecidedBeyond(c, 4e-5)) ++decided;
    ASSERT_TRUE(c["selection_margin"].is_number());
    const double margin = c["selection_margin"].get<double>();
    EXPECT_TRUE(std::isfinite(margin) && margin >= 0.0) << margin;
    EXPECT_FALSE(c.value("selection_margin_at", std::string()).empty());
  }
  EXPECT_EQ(cases, 21);
  EXPECT_GE(decided, cases - 2);
}

INSTANTIATE_TEST_SUITE_P(Models, BeamSearchGoldenTest,
                         ::testing::Values("bloom-tiny-h4", "bloom-tiny-untied", "bloom-demo"));

std::vector<int32_t> LongPrompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 70; ++i) prompt.push_back(10 + (i * 37) % 1500);
  return prompt;
}

BeamSearchParams Wide(int32_t max_new) {
  BeamSearchParams p;
  p.beam_width = 4;
  p.num_return_sequences = 2;
  p.max_new_tokens = max_new;
  return p;
}

// Counts what the steps report (on the engine thread; read after the search is over).
class StepCounter : public EngineObserver {
 public:
  void OnStep(const StepStats& step) override {
    finished_prompt_tokens += step.finished_prompt_tokens;
    generated_tokens += step.generated_tokens;
  }
  std::atomic<int64_t> finished_prompt_tokens{0}, generated_tokens{0};
};

TEST(BeamSearchTest, ThePrefixCacheSavesAllButTheLastBlockOfEachBeam) {
  auto model = TinyModel::Load();
  ASSERT_NE(model, nullptr);
  StepCounter steps;
  auto engine = MakeEngine(*model, /*prefix_caching=*/true, &steps);
  ASSERT_NE(engine, nullptr);
  auto outcome = Search(engine.get(), LongPrompt(), Wide(20));
  ASSERT_TRUE(outcome.ok() && outcome->status.ok());
  EXPECT_EQ(outcome->rounds, 20);
  // Round 0 computes the 70-token prompt; after it, each of the 4 beams recomputes at most the
  // 16-token block its last tokens are in.
  EXPECT_LE(outcome->computed_tokens, 70 + 19 * 4 * 16);
  EXPECT_GE(outcome->cached_tokens, 19 * 4 * 64);
  // The rounds' prompts are not the server's prompt tokens (the search counts its own once);
  // every round's token is a generated token (round 0 is the prompt's one request, each later
  // round one per beam).
  engine->Shutdown();
  EXPECT_EQ(steps.finished_prompt_tokens.load(), 0);
  EXPECT_EQ(steps.generated_tokens.load(), 1 + 19 * 4);
}

// A search of 500 rounds (no end token), running for 50 ms when this returns.
absl::StatusOr<std::shared_ptr<BeamSearch>> StartLongSearch(Engine* engine, OutcomeWaiter& waiter) {
  BeamSearchRequest request;
  request.prompt_tokens = LongPrompt();
  request.params = Wide(500);
  request.params.end_tokens = {};
  auto search = BeamSearch::Start(engine, std::move(request), waiter.Callback());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return search;
}

TEST(BeamSearchTest, CancelEndsTheSearchAndFreesItsBlocks) {
  auto model = TinyModel::Load();
  ASSERT_NE(model, nullptr);
  auto engine = MakeEngine(*model);
  ASSERT_NE(engine, nullptr);
  OutcomeWaiter waiter;
  auto search = StartLongSearch(engine.get(), waiter);
  ASSERT_TRUE(search.ok()) << search.status();
  (*search)->Cancel();
  BeamSearchOutcome outcome;
  ASSERT_TRUE(waiter.Wait(&outcome));
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(outcome.beams.empty());
  (*search)->Cancel();  // again, after the end: nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(waiter.calls(), 1);
  EXPECT_EQ(engine->num_unfinished(), 0);
  EXPECT_EQ(engine->scheduler_stats().blocks_used, 0);
}

TEST(BeamSearchTest, RefusalsComeFromStartAndNameTheField) {
  auto model = TinyModel::Load();
  ASSERT_NE(model, nullptr);
  auto engine = MakeEngine(*model);
  ASSERT_NE(engine, nullptr);
  BeamSearchParams wide = Wide(4);
  wide.beam_width = 11;
  auto refused = Search(engine.get(), {5, 6}, wide);  // beam_width 11
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("beam_width"), std::string::npos);
  EXPECT_EQ(Search(engine.get(), {}, Wide(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The engine's own checks: an out-of-vocabulary prompt token, a prompt over the length cap.
  EXPECT_EQ(Search(engine.get(), {5, 99999}, Wide(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Search(engine.get(), {5}, Wide(5000)).ok());  // over max_total_tokens
  EXPECT_EQ(engine->num_unfinished(), 0);
}

// A search whose longest beam could never fit the KV cache is refused at once, not after the
// rounds that do fit (each round alone is short).
TEST(BeamSearchTest, ASearchOverTheKvCacheIsRefusedAtStart) {
  auto model = TinyModel::Load();
  ASSERT_NE(model, nullptr);
  EngineConfig config;
  config.kv_cache_bytes = 64 << 10;  // 4 blocks of 16 tokens of this model
  auto engine = Engine::Create(model->runner(), model->tokenizer(), config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_FALSE((*engine)->CheckFits(1, 100).ok());
  auto refused = Search(engine->get(), {5}, Wide(100));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("KV"), std::string::npos) << refused.status();
  EXPECT_TRUE(Search(engine->get(), {5}, Wide(30)).ok());
  EXPECT_EQ((*engine)->num_unfinished(), 0);
}

TEST(BeamSearchTest, SearchesRunAlongsideEachOtherAndOrdinaryRequests) {
  auto model = TinyModel::Load();
  ASSERT_NE(model, nullptr);
  auto engine = MakeEngine(*model);
  ASSERT_NE(engine, nullptr);
  // Alone first, as the reference.
  auto alone = Search(engine.get(), LongPrompt(), Wide(12));
  ASSERT_TRUE(alone.ok() && alone->status.ok());
  auto greedy_stream = engine->Submit(GreedyRequest({7, 8, 9}, 40));
  ASSERT_TRUE(greedy_stream.ok());
  std::vector<std::unique_ptr<OutcomeWaiter>> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(std::make_unique<OutcomeWaiter>());
    BeamSearchRequest request;
    request.prompt_tokens = LongPrompt();
    request.params = Wide(12);
    ASSERT_TRUE(BeamSearch::Start(engine.get(), std::move(request), waiters.back()->Callback())
                    .ok());
  }
  for (auto& waiter : waiters) {
    BeamSearchOutcome outcome;
    ASSERT_TRUE(waiter->Wait(&outcome));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    ASSERT_EQ(outcome.beams.size(), alone->beams.size());
    for (size_t i = 0; i < outcome.beams.size(); ++i) {
      EXPECT_EQ(outcome.beams[i].tokens, alone->beams[i].tokens);
    }
  }
  EngineEvent event;
  int tokens = 0;
  while ((*greedy_stream)->Next(&event)) tokens += event.has_token ? 1 : 0;
  EXPECT_EQ(tokens, 40);
  EXPECT_EQ(engine->num_unfinished(), 0);
  EXPECT_EQ(engine->scheduler_stats().blocks_used, 0);
}

// The queue bound that refuses a search for good names itself; both bounds are inclusive.
TEST(BeamSearchTest, CheckQueueCanHoldNamesTheBoundExceeded) {
  SchedulerConfig limits;
  limits.max_waiting_requests = 4;
  limits.max_waiting_prompt_tokens = 40;
  EXPECT_TRUE(BeamSearch::CheckQueueCanHold(limits, 4, 6, 4).ok());  // 4 x 10 = 40
  absl::Status wide = BeamSearch::CheckQueueCanHold(limits, 5, 1, 1);
  EXPECT_EQ(wide.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wide.message().find("--max_waiting_requests (4), got 5"), absl::string_view::npos) << wide;
  absl::Status long_rounds = BeamSearch::CheckQueueCanHold(limits, 4, 6, 5);
  EXPECT_EQ(long_rounds.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(long_rounds.message().find("is 44 tokens"), absl::string_view::npos) << long_rounds;
}

// One sequence runs at a time and 8 may wait. A 6-beam search is admitted only with room for
// its widest round; then ordinary requests fill the queue to the brim. Round 1 finds the queue
// full (at most one of them admitted meanwhile) and is queued anyway: without the bypass its
// requests would be refused and the search lost midway. A search wider than the queue is
// refused for good; one that finds the queue full now is told to retry.
TEST(BeamSearchTest, AnAdmittedSearchIsNeverRefusedMidway) {
  auto model = TinyModel::Load();
  ASSERT_NE(model, nullptr);
  EngineConfig config;
  config.kv_cache_bytes = 16 << 20;
  config.scheduler.max_num_seqs = 1;
  config.scheduler.max_waiting_requests = 8;
  auto engine = Engine::Create(model->runner(), model->tokenizer(), config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::shared_ptr<RequestStream>> greedy;
  // False once the queue refuses it (full).
  auto submit_greedy = [&](int32_t tokens) {
    auto stream = (*engine)->Submit(
        GreedyRequest({7, 8, static_cast<int32_t>(9 + greedy.size())}, tokens));
    if (stream.ok()) greedy.push_back(*stream);
    return stream.ok();
  };
  ASSERT_TRUE(submit_greedy(600));  // runs (one at a time)
  ASSERT_TRUE(submit_greedy(600));  // waits
  OutcomeWaiter waiter;
  BeamSearchRequest request;
  request.prompt_tokens = {5, 6, 7};
  request.params = Wide(6);
  request.params.beam_width = 6;
  ASSERT_TRUE(BeamSearch::Start(engine->get(), request, waiter.Callback()).ok());
  int extra = 0;
  while (extra < 10 && submit_greedy(8)) ++extra;
  EXPECT_GE(extra, 5);
  EXPECT_LT(extra, 10) << "the queue never filled";
  BeamSearchRequest another = request;
  another.params.beam_width = 2;
  auto busy = BeamSearch::Start(engine->get(), another, waiter.Callback());
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kResourceExhausted) << busy.status();
  BeamSearchRequest wide = request;
  wide.params.beam_width = 9;
  EXPECT_EQ(BeamSearch::Start(engine->get(), wide, waiter.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
  BeamSearchOutcome outcome;
  ASSERT_TRUE(waiter.Wait(&outcome));
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_EQ(outcome.beams.size(), 2u);
  EXPECT_EQ(waiter.calls(), 1);
  EngineEvent event;
  for (auto& stream : greedy) {
    while (stream->Next(&event)) EXPECT_TRUE(event.status.ok()) << event.status;
  }
  EXPECT_EQ((*engine)->num_unfinished(), 0);
}

TEST(BeamSearchTest, ShutdownEndsASearchWithAnError) {
  auto model = TinyModel::Load();
  ASSERT_NE(model, nullptr);
  auto engine = MakeEngine(*model);
  ASSERT_NE(engine, nullptr);
  OutcomeWaiter waiter;
  ASSERT_TRUE(StartLongSearch(engine.get(), waiter).ok());
  engine->Shutdown();
  BeamSearchOutcome outcome;
  ASSERT_TRUE(waiter.Wait(&outcome));
  EXPECT_FALSE(outcome.status.ok());
  EXPECT_TRUE(outcome.beams.empty());
  EXPECT_EQ(waiter.calls(), 1);
}

}  // namespace
}  // namespace blossom
