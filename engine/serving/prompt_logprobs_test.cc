// Prompt logprobs (SamplingParams::prompt_logprobs) through the serving engine, against Hugging
// Face's log_softmax of the golden logits (tests/fixtures/generate.py: prompt_logprobs and
// prompt_top5_* of each logits prompt). Also: a request asking for them computes its whole
// prompt even when the prefix cache holds it, and chunked prefill gives the same values.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/loader/safetensors.h"
#include "engine/serving/engine.h"
#include "engine/serving/engine_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

// Logits agree with HF within 1e-4 (bloom_model_test); a log-softmax value moves by at most
// twice that.
constexpr double kLogprobTolerance = 2e-4;

class PromptLogprobsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = engine_testing::TinyModel::Load(GetParam());
    ASSERT_NE(model_, nullptr);
    golden_ = nlohmann::json::parse(
        ReadFileOrEmpty(FixturePath("goldens/" + GetParam() + "/golden.json")), nullptr, false);
    ASSERT_FALSE(golden_.is_discarded());
  }

  std::unique_ptr<Engine> MakeEngine(int32_t max_batched_tokens, int32_t max_prompt_logprob_rows = 256,
                                     EngineObserver* observer = nullptr) {
    EngineConfig config;
    config.max_prompt_logprob_rows = max_prompt_logprob_rows;
    config.scheduler.block_size = 4;
    config.scheduler.num_blocks = 128;
    config.scheduler.max_num_batched_tokens = max_batched_tokens;
    config.scheduler.max_total_tokens = 256;
    config.scheduler.enable_prefix_caching = true;
    auto engine = Engine::Create(model_->runner(), model_->tokenizer(), config, observer);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // Runs one greedy request for 2 tokens; returns the prompt logprobs it reported (once).
  static std::vector<PromptLogprob> Run(Engine& engine, const std::vector<int32_t>& prompt,
                                       int32_t prompt_logprobs) {
    EngineRequest request;
    request.prompt_tokens = prompt;
    request.sampling.temperature = 0.0;
    request.sampling.prompt_logprobs = prompt_logprobs;
    request.stopping.max_new_tokens = 2;
    request.stopping.ignore_eos = true;
    auto stream = engine.Submit(request);
    EXPECT_TRUE(stream.ok()) << stream.status();
    if (!stream.ok()) return {};
    std::vector<PromptLogprob> got;
    int reported = 0, tokens = 0;
    EngineEvent e;
    while ((*stream)->Next(&e)) {
      EXPECT_TRUE(e.status.ok()) << e.status;
      if (e.has_token) ++tokens;
      if (!e.prompt_logprobs.empty()) {
        ++reported;
        got = e.prompt_logprobs;
        EXPECT_TRUE(e.has_token);
        EXPECT_EQ(tokens, 1) << "prompt logprobs come with the first token";
      }
    }
    EXPECT_EQ(tokens, 2);
    EXPECT_LE(reported, 1);
    return got;
  }

  // Checks `got` against the golden entry's HF values.
  static void ExpectMatchesGolden(const std::vector<PromptLogprob>& got,
                                  const nlohmann::json& item, int32_t top_n) {
    const auto ids = item["input_ids"].get<std::vector<int32_t>>();
    const auto want = item["prompt_logprobs"].get<std::vector<double>>();
    const auto top_ids = item["prompt_top5_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto top_lp = item["prompt_top5_logprobs"].get<std::vector<std::vector<double>>>();
    ASSERT_EQ(got.size(), ids.size() - 1) << item["text"];
    ASSERT_EQ(want.size(), got.size());
    for (size_t p = 0; p < got.size(); ++p) {
      EXPECT_EQ(got[p].token, ids[p + 1]) << "position " << p + 1;
      EXPECT_NEAR(got[p].logprob, want[p], kLogprobTolerance) << "position " << p + 1;
      ASSERT_EQ(got[p].top.size(), static_cast<size_t>(top_n));
      for (int32_t j = 0; j < top_n; ++j) {
        EXPECT_NEAR(got[p].top[j].logprob, top_lp[p][j], kLogprobTolerance);
        // Ids must agree unless two alternatives are closer than the numeric tolerance.
        const bool clear_gap = (j == 0 || top_lp[p][j - 1] - top_lp[p][j] > kLogprobTolerance) &&
                               (j + 1 >= 5 || top_lp[p][j] - top_lp[p][j + 1] > kLogprobTolerance);
        if (clear_gap) {
          EXPECT_EQ(got[p].top[j].token, top_ids[p][j]) << "position " << p + 1;
        }
      }
    }
  }

  std::unique_ptr<engine_testing::TinyModel> model_;
  nlohmann::json golden_;
};

TEST_P(PromptLogprobsTest, MatchTransformersLogSoftmax) {
  std::unique_ptr<Engine> engine = MakeEngine(256);
  ASSERT_NE(engine, nullptr);
  int checked = 0;
  for (const auto& item : golden_["logits"]) {
    const auto ids = item["input_ids"].get<std::vector<int32_t>>();
    std::vector<PromptLogprob> got = Run(*engine, ids, 5);
    if (ids.size() == 1) {
      EXPECT_TRUE(got.empty());  // a one-token prompt has nothing to score
      continue;
    }
    ExpectMatchesGolden(got, item, 5);
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST_P(PromptLogprobsTest, NotRequestedMeansNone) {
  std::unique_ptr<Engine> engine = MakeEngine(256);
  ASSERT_NE(engine, nullptr);
  EXPECT_TRUE(Run(*engine, golden_["logits"][1]["input_ids"].get<std::vector<int32_t>>(), -1)
                  .empty());
}

TEST_P(PromptLogprobsTest, CachedPrefixAndChunkedPrefillStillScoreEveryToken) {
  const auto& item = golden_["logits"][3];  // the longest prompts span many 4-token blocks
  const auto ids = item["input_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 12u);
  std::unique_ptr<Engine> engine = MakeEngine(256);
  ASSERT_NE(engine, nullptr);
  Run(*engine, ids, -1);  // fills the prefix cache with this prompt's full blocks
  std::vector<PromptLogprob> after_cache = Run(*engine, ids, 0);
  ExpectMatchesGolden(after_cache, item, 0);
  std::unique_ptr<Engine> chunked = MakeEngine(3);  // prefill in chunks of 3 tokens
  ASSERT_NE(chunked, nullptr);
  std::vector<PromptLogprob> in_chunks = Run(*chunked, ids, 0);
  ExpectMatchesGolden(in_chunks, item, 0);
  ASSERT_EQ(in_chunks.size(), after_cache.size());
  for (size_t p = 0; p < in_chunks.size(); ++p) {
    EXPECT_EQ(in_chunks[p].logprob, after_cache[p].logprob) << "CPU is batch invariant";
  }
}

// Ranks against Hugging Face's own logits (golden.safetensors p<i> [S, V]): a prompt token's HF
// rank, counting as either order the competitors whose logits lie within the logit tolerance of
// its own (a near-tie may go either way in fp32).
TEST_P(PromptLogprobsTest, RanksMatchTransformers) {
  constexpr double kLogitTolerance = 1e-4;  // bloom_model_test's agreement with HF
  auto file = SafetensorsFile::Open(FixturePath("goldens/" + GetParam() + "/golden.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::unique_ptr<Engine> engine = MakeEngine(256);
  ASSERT_NE(engine, nullptr);
  int exact = 0, checked = 0;
  for (const auto& item : golden_["logits"]) {
    const auto ids = item["input_ids"].get<std::vector<int32_t>>();
    if (ids.size() < 2) continue;
    const TensorEntry* entry = (*file)->Find(item["name"].get<std::string>());
    ASSERT_NE(entry, nullptr) << item["name"];
    auto view = (*file)->View(*entry);
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_EQ(entry->shape.size(), 2u);
    const int64_t vocab = entry->shape[1];
    const float* hf = view->as<const float>();
    std::vector<PromptLogprob> got = Run(*engine, ids, 0);
    ASSERT_EQ(got.size(), ids.size() - 1);
    for (size_t p = 0; p + 1 < ids.size(); ++p) {
      const float* row = hf + static_cast<int64_t>(p) * vocab;
      const double x = row[ids[p + 1]];
      int32_t clearly_above = 0, maybe_above = 0;  // maybe_above counts the token itself
      for (int64_t v = 0; v < vocab; ++v) {
        clearly_above += row[v] > x + kLogitTolerance;
        maybe_above += row[v] > x - kLogitTolerance;
      }
      EXPECT_GE(got[p].rank, 1 + clearly_above) << item["name"] << " position " << p + 1;
      EXPECT_LE(got[p].rank, maybe_above) << item["name"] << " position " << p + 1;
      exact += 1 + clearly_above == maybe_above;
      ++checked;
    }
  }
  EXPECT_GE(checked, 90);
  EXPECT_GE(exact, checked * 3 / 4) << "most ranks have no near-tie: the check must bite";
}

// The most prefill tokens of any step.
class LargestPrefill : public EngineObserver {
 public:
  void OnStep(const StepStats& step) override {
    largest = std::max(largest.load(), step.prefill_tokens);
  }
  std::atomic<int32_t> largest{0};
};

// A prompt-logprob request's prefill is cut to max_prompt_logprob_rows tokens a step (bounded
// logits), however large the token budget, and still scores every token as one step would.
TEST_P(PromptLogprobsTest, PromptLogprobPrefillIsCutToTheRowCap) {
  const auto& item = golden_["logits"][3];
  const auto ids = item["input_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 12u);
  LargestPrefill capped_steps, plain_steps;
  std::unique_ptr<Engine> capped = MakeEngine(256, /*max_prompt_logprob_rows=*/5, &capped_steps);
  ASSERT_NE(capped, nullptr);
  ExpectMatchesGolden(Run(*capped, ids, 0), item, 0);
  EXPECT_EQ(capped_steps.largest.load(), 5);
  // Without prompt logprobs the cap does not apply: one step.
  std::unique_ptr<Engine> plain = MakeEngine(256, 5, &plain_steps);
  ASSERT_NE(plain, nullptr);
  Run(*plain, ids, -1);
  EXPECT_EQ(plain_steps.largest.load(), static_cast<int32_t>(ids.size()));
}

// Holds the engine after its first step until Open(), then records the most prefill tokens of a
// step after the first step that preempted.
class GatedSteps : public EngineObserver {
 public:
  void OnStep(const StepStats& step) override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      open_cv_.wait(lock, [&] { return open_; });
    }
    if (step.preemptions > 0) {
      preempted = true;
    } else if (preempted) {
      largest_after = std::max(largest_after.load(), step.prefill_tokens);
    }
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    open_cv_.notify_all();
  }
  std::atomic<bool> preempted{false};
  std::atomic<int32_t> largest_after{0};

 private:
  std::mutex mutex_;
  std::condition_variable open_cv_;
  bool open_ = false;
};

// A one-token prompt has no prompt token to score, so its request is not held to
// max_prompt_logprob_rows: its recompute after a preemption runs at the token budget's pace
// (it used to take 2 tokens a step here, and the step's capped rows with them).
TEST_P(PromptLogprobsTest, AOneTokenPromptIsNotCapped) {
  GatedSteps steps;
  EngineConfig config;
  config.max_prompt_logprob_rows = 2;
  config.scheduler.block_size = 4;
  config.scheduler.num_blocks = 6;  // too few for both requests: the lower-priority one yields
  config.scheduler.max_num_batched_tokens = 256;
  config.scheduler.max_total_tokens = 24;
  config.scheduler.enable_prefix_caching = false;  // a recompute computes every token
  auto engine = Engine::Create(model_->runner(), model_->tokenizer(), config, &steps);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const auto ids = golden_["logits"][3]["input_ids"].get<std::vector<int32_t>>();
  EngineRequest one = engine_testing::GreedyRequest({ids[0]}, 16);
  one.sampling.prompt_logprobs = 0;
  one.priority = 1;
  auto one_stream = (*engine)->Submit(one);
  auto other = (*engine)->Submit(engine_testing::GreedyRequest({ids[0], ids[1], ids[2]}, 16));
  steps.Open();  // both are in the engine from its second step on
  ASSERT_TRUE(one_stream.ok()) << one_stream.status();
  ASSERT_TRUE(other.ok()) << other.status();
  int32_t tokens = 0, preemptions = 0;
  EngineEvent e;
  while ((*one_stream)->Next(&e)) {
    EXPECT_TRUE(e.status.ok()) << e.status;
    EXPECT_TRUE(e.prompt_logprobs.empty());
    tokens += e.has_token ? 1 : 0;
    if (e.finished) preemptions = e.timings.num_preemptions;
  }
  while ((*other)->Next(&e)) EXPECT_TRUE(e.status.ok()) << e.status;
  EXPECT_EQ(tokens, 16);
  ASSERT_GE(preemptions, 1) << "the pool was meant to be too small";
  EXPECT_GT(steps.largest_after.load(), config.max_prompt_logprob_rows);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PromptLogprobsTest,
                         ::testing::Values("bloom-tiny-h4", "bloom-tiny-untied"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace blossom
