// Test helpers for beam search through an engine: waiting for a search's outcome, a search run to
// its end, and the comparison of one Hugging Face golden case (tests/fixtures/goldens/*/
// beam_search.json, written by tests/fixtures/fixture_beam.py), for the CPU and CUDA tests.
#ifndef BLOSSOM_ENGINE_SERVING_BEAM_SEARCH_TEST_UTIL_H_
#define BLOSSOM_ENGINE_SERVING_BEAM_SEARCH_TEST_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/serving/beam_search.h"
#include "engine/serving/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

namespace blossom::beam_testing {

// Waits for one search's outcome.
class OutcomeWaiter {
 public:
  BeamSearch::Done Callback() {
    return [this](BeamSearchOutcome outcome) {
      std::lock_guard<std::mutex> lock(mutex_);
      outcome_ = std::move(outcome);
      calls_++;
      cv_.notify_all();
    };
  }
  // False when no outcome came within 60 s.
  bool Wait(BeamSearchOutcome* out) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return calls_ > 0; })) return false;
    *out = outcome_;
    return true;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  BeamSearchOutcome outcome_;
  int calls_ = 0;
};

inline BeamSearchParams ParamsFromGolden(const nlohmann::json& c) {
  BeamSearchParams p;
  p.beam_width = c["num_beams"].get<int32_t>();
  p.num_return_sequences = c["num_return_sequences"].get<int32_t>();
  p.max_new_tokens = c["max_new_tokens"].get<int32_t>();
  p.min_new_tokens = c["min_new_tokens"].get<int32_t>();
  p.length_penalty = c["length_penalty"].get<double>();
  const nlohmann::json& early = c["early_stopping"];
  p.early_stopping = early.is_string()  ? EarlyStopping::kNever
                     : early.get<bool>() ? EarlyStopping::kWhenFull
                                         : EarlyStopping::kHeuristic;
  p.end_tokens = c["end_token_ids"].get<std::vector<int32_t>>();
  return p;
}

inline absl::StatusOr<BeamSearchOutcome> Search(Engine* engine, std::vector<int32_t> prompt,
                                                BeamSearchParams params) {
  OutcomeWaiter waiter;
  BeamSearchRequest request;
  request.prompt_tokens = std::move(prompt);
  request.params = std::move(params);
  auto search = BeamSearch::Start(engine, std::move(request), waiter.Callback());
  if (!search.ok()) return search.status();
  BeamSearchOutcome outcome;
  if (!waiter.Wait(&outcome)) return absl::DeadlineExceededError("no outcome within 60 s");
  return outcome;
}

// goldens/<model>/beam_search.json, parsed (a gtest failure and a discarded value if missing).
inline nlohmann::json LoadGoldens(const std::string& model) {
  std::ifstream in(FixturePath("goldens/" + model + "/beam_search.json"));
  EXPECT_TRUE(in) << "missing beam_search.json for " << model;
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, false);
}

// Whether no per-token logprob error below `per_token_error` could flip golden case `c`'s answer:
// its selection_margin (tests/fixtures/fixture_beam_margin.py: the smallest such error for any
// comparison the returned sequences depend on, with no shared prefix assumed to cancel) is at
// least that. An engine whose logprobs are within `per_token_error` of HF's owes HF's answer only
// for such a case. A case without the field is a test failure (goldens older than the field:
// regenerate them).
inline bool DecidedBeyond(const nlohmann::json& c, double per_token_error) {
  EXPECT_TRUE(c.contains("selection_margin") && c["selection_margin"].is_number())
      << "regenerate the goldens: tests/fixtures/generate.py --only-beam";
  return c.value("selection_margin", 0.0) >= per_token_error;
}

// Runs golden case `c` on `engine` and checks it: every returned sequence equal to HF's, token
// for token, and its summed logprobs within `per_token_tolerance` a token of HF's (each
// token's logprob differs from HF's as the logits do, the fp32 sums round, and a length penalty
// scales the sum: the score is compared through the sum).
inline void ExpectGoldenCase(Engine* engine, const nlohmann::json& c, double per_token_tolerance) {
  auto outcome = Search(engine, c["prompt_ids"].get<std::vector<int32_t>>(),
                        ParamsFromGolden(c));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ASSERT_TRUE(outcome->status.ok()) << outcome->status;
  const auto& sequences = c["sequences"];
  const auto& scores = c["scores"];
  ASSERT_EQ(outcome->beams.size(), sequences.size());
  const std::vector<int32_t> end_tokens = c["end_token_ids"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < sequences.size(); ++i) {
    const BeamHypothesis& beam = outcome->beams[i];
    std::vector<int32_t> want_tokens = sequences[i].get<std::vector<int32_t>>();
    // HF writes end_token_ids[0] after a finished sequence whichever end token finished it
    // (BeamSearchScorer.finalize); the score tells the end tokens apart.
    ASSERT_FALSE(beam.tokens.empty());
    if (beam.ended_by_end_token) {
      EXPECT_NE(std::find(end_tokens.begin(), end_tokens.end(), beam.tokens.back()),
                end_tokens.end());
      EXPECT_EQ(want_tokens.back(), end_tokens.front()) << "beam " << i;
      want_tokens.back() = beam.tokens.back();
    }
    EXPECT_EQ(beam.tokens, want_tokens) << "beam " << i;
    const double length = static_cast<double>(beam.tokens.size());
    const double penalty = std::pow(length, c["length_penalty"].get<double>());
    const double want_sum = scores[i].get<double>() * penalty;
    EXPECT_TRUE(std::isfinite(beam.score)) << "beam " << i;
    EXPECT_NEAR(beam.score * penalty, beam.cumulative_logprob, 1e-9 * length);
    EXPECT_NEAR(beam.cumulative_logprob, want_sum, per_token_tolerance * length) << "beam " << i;
    EXPECT_EQ(beam.logprobs.size(), beam.tokens.size());
  }
}

}  // namespace blossom::beam_testing

#endif  // BLOSSOM_ENGINE_SERVING_BEAM_SEARCH_TEST_UTIL_H_
