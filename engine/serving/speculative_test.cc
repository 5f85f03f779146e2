// Speculative decoding (prompt lookup) in the serving engine: the same streams as without it.
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "engine/guided/constraint_cache.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/model/pretend_device_runner.h"
#include "engine/serving/engine.h"
#include "engine/serving/engine_test_util.h"
#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

// What a client sees of one request.
struct Stream {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t generated = 0;
  uint64_t seed = 0;
};

class StepCounter : public EngineObserver {
 public:
  void OnStep(const StepStats& s) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++steps;
    drafts += s.draft_tokens;
    accepted += s.accepted_draft_tokens;
    generated += s.generated_tokens;
    preemptions += s.preemptions;
  }
  std::mutex mutex_;
  int64_t steps = 0, drafts = 0, accepted = 0, generated = 0, preemptions = 0;
};

class SpeculativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = engine_testing::TinyModel::Load().release();
    ASSERT_NE(model_, nullptr);
    runner_ = model_->runner();
    tokenizer_ = model_->tokenizer();
  }
  static void TearDownTestSuite() { delete model_; }

  // Runs `requests` concurrently on a fresh engine (speculating with k draft tokens; 0: off).
  static std::vector<Stream> Run(const std::vector<EngineRequest>& requests, int32_t k,
                                 StepCounter* counter, int32_t num_blocks = 256,
                                 ModelRunner* runner = nullptr) {
    EngineConfig config;
    config.scheduler.block_size = 4;
    config.scheduler.num_blocks = num_blocks;
    config.scheduler.max_total_tokens = 256;
    config.speculative.num_speculative_tokens = k;
    config.speculative.lookup_max = 3;
    config.speculative_max_running = 64;
    auto engine = Engine::Create(runner != nullptr ? runner : runner_, tokenizer_, config, counter);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const EngineRequest& r : requests) {
      auto stream = (*engine)->Submit(r);
      EXPECT_TRUE(stream.ok()) << stream.status();
      streams.push_back(*stream);
    }
    std::vector<Stream> out;
    for (auto& stream : streams) {
      Stream s;
      EngineEvent e;
      while (stream->Next(&e)) {
        if (e.has_token) {
          s.tokens.push_back(e.token.token);
          s.logprobs.push_back(e.token.logprob);
          s.top.push_back(e.token.top_logprobs);
        }
        s.text += e.token.text_delta;
        if (e.finished) {
          EXPECT_TRUE(e.status.ok()) << e.status;
          s.finish_reason = e.finish_reason;
          s.generated = e.usage.generated_tokens;
          s.seed = e.seed;
        }
      }
      out.push_back(std::move(s));
    }
    EXPECT_EQ((*engine)->scheduler_stats().blocks_used, 0);
    return out;
  }

  static engine_testing::TinyModel* model_;
  static ModelRunner* runner_;
  static Tokenizer* tokenizer_;
};

engine_testing::TinyModel* SpeculativeTest::model_ = nullptr;
ModelRunner* SpeculativeTest::runner_ = nullptr;
Tokenizer* SpeculativeTest::tokenizer_ = nullptr;

// Prompts that repeat themselves, so that lookup finds drafts from the first decode step.
std::vector<int32_t> Looping(int32_t seed, int32_t period, int32_t length) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < length; ++i) p.push_back(100 + (seed * 37 + (i % period) * 11) % 900);
  return p;
}

std::vector<EngineRequest> Requests() {
  std::vector<EngineRequest> rs;
  for (int32_t i = 0; i < 12; ++i) {
    EngineRequest r;
    r.prompt_tokens = Looping(i, 3 + i % 4, 9 + 2 * i);
    r.stopping.max_new_tokens = i == 0 ? 1 : (i == 1 ? 2 : 24 + i * 3);
    r.stopping.ignore_eos = i % 2 == 0;
    switch (i % 4) {
      case 0:  // greedy, with logprobs
        r.sampling.temperature = 0.0f;
        r.sampling.logprobs = 3;
        break;
      case 1:  // seeded sampling
        r.sampling.temperature = 0.9f;
        r.sampling.top_k = 40;
        r.sampling.seed = 1000 + i;
        break;
      case 2:  // penalties see the accepted drafts as context
        r.sampling.temperature = 0.0f;
        r.sampling.repetition_penalty = 1.2f;
        r.sampling.frequency_penalty = 0.3f;
        break;
      default:  // sampling with a stop token that the loop is likely to hit
        r.sampling.temperature = 0.7f;
        r.sampling.top_p = 0.9f;
        r.sampling.seed = 7 * i;
        r.sampling.logprobs = 1;
        r.stopping.stop_token_ids = {r.prompt_tokens[2]};
        r.stopping.min_new_tokens = 3;
        break;
    }
    rs.push_back(std::move(r));
  }
  return rs;
}

void ExpectSameStreams(const std::vector<Stream>& off, const std::vector<Stream>& on,
                       const std::vector<EngineRequest>& requests) {
  ASSERT_EQ(off.size(), on.size());
  for (size_t i = 0; i < off.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "request " << i);
    EXPECT_EQ(off[i].tokens, on[i].tokens);
    EXPECT_EQ(off[i].logprobs, on[i].logprobs);  // bit for bit
    ASSERT_EQ(off[i].top.size(), on[i].top.size());
    for (size_t t = 0; t < off[i].top.size(); ++t) {
      ASSERT_EQ(off[i].top[t].size(), on[i].top[t].size());
      for (size_t a = 0; a < off[i].top[t].size(); ++a) {
        EXPECT_EQ(off[i].top[t][a].token, on[i].top[t][a].token);
        EXPECT_EQ(off[i].top[t][a].logprob, on[i].top[t][a].logprob);
      }
    }
    EXPECT_EQ(off[i].text, on[i].text);
    EXPECT_EQ(off[i].finish_reason, on[i].finish_reason);
    EXPECT_EQ(off[i].generated, on[i].generated);
    EXPECT_EQ(off[i].generated, static_cast<int32_t>(on[i].tokens.size()));
    if (requests[i].sampling.seed.has_value()) {
      EXPECT_EQ(off[i].seed, on[i].seed);
    }
  }
}

TEST_F(SpeculativeTest, SameStreamsInABatch) {
  const std::vector<EngineRequest> requests = Requests();
  StepCounter plain, spec;
  const std::vector<Stream> off = Run(requests, 0, &plain);
  const std::vector<Stream> on = Run(requests, 4, &spec);
  ExpectSameStreams(off, on, requests);
  EXPECT_EQ(plain.drafts, 0);
  // Not vacuous: drafts were proposed and some were right, which saved steps.
  EXPECT_GT(spec.drafts, 0);
  EXPECT_GT(spec.accepted, 0);
  EXPECT_LE(spec.accepted, spec.drafts);
  EXPECT_EQ(spec.generated, plain.generated);
  RecordProperty("drafts", std::to_string(spec.drafts));
  RecordProperty("accepted", std::to_string(spec.accepted));
}

// Structured output under speculation: drafts the constraint refuses are rejected at the
// position they would enter, so the streams equal those without drafts and stay in the grammar.
TEST_F(SpeculativeTest, ConstrainedRequestsGiveTheSameStreams) {
  ConstraintCache cache([] { return TokenVocabulary::FromTokenizer(*tokenizer_); });
  auto regex = cache.Regex("[a-z ]{1,30}\\.");
  auto schema = cache.JsonSchema(
      R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  ASSERT_TRUE(regex.ok() && schema.ok());
  std::vector<EngineRequest> requests;
  for (int32_t i = 0; i < 6; ++i) {
    EngineRequest r;
    r.prompt_tokens = Looping(i, 3 + i % 3, 12 + i);
    r.stopping.max_new_tokens = 48;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    r.sampling.seed = 50 + i;
    r.sampling.constraint = i < 3 ? *regex : *schema;
    requests.push_back(std::move(r));
  }
  StepCounter off_steps, on_steps;
  const std::vector<Stream> off = Run(requests, 0, &off_steps);
  const std::vector<Stream> on = Run(requests, 4, &on_steps);
  ExpectSameStreams(off, on, requests);
  for (size_t i = 0; i < on.size(); ++i) {
    if (on[i].finish_reason != FinishReason::kEosToken) continue;
    if (i < 3) {
      EXPECT_TRUE(std::regex_match(on[i].text, std::regex("[a-z ]{1,30}\\."))) << on[i].text;
    } else {
      // Leading whitespace is JSON's; none may follow the value.
      EXPECT_TRUE(std::regex_match(on[i].text, std::regex("\\s*\\{\\s*\"n\"\\s*:\\s*-?\\d+\\s*\\}")))
          << on[i].text;
    }
  }
}

TEST_F(SpeculativeTest, OneAtATimeAndUnderPreemption) {
  // Alone (the batch-1 case speculation is for) and in a pool so small that sequences are
  // preempted and recomputed mid-stream: still the same streams.
  const std::vector<EngineRequest> requests = Requests();
  StepCounter plain, spec, tight;
  std::vector<Stream> off, on;
  for (const EngineRequest& r : requests) {
    off.push_back(Run({r}, 0, &plain)[0]);
    on.push_back(Run({r}, 6, &spec)[0]);
  }
  ExpectSameStreams(off, on, requests);
  EXPECT_GT(spec.accepted, 0);
  // Alone, each accepted draft is a step saved.
  EXPECT_EQ(spec.steps, plain.steps - spec.accepted);
  ExpectSameStreams(off, Run(requests, 4, &tight, /*num_blocks=*/40), requests);
  EXPECT_GT(tight.preemptions, 0);
  EXPECT_GT(tight.accepted, 0);
}

TEST_F(SpeculativeTest, StepsWithDraftsBypassCapturedDecodeGraphs) {
  // With step graphs (recorded op lists on the CPU, CUDA graphs on a GPU) plain decode steps are
  // replayed and steps carrying drafts run uncaptured: the same streams either way.
  ModelRunnerOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.threads_per_rank = 2;
  options.prefetch = false;
  options.step_graphs = true;
  auto graphs = ModelRunner::Create(options);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  const std::vector<EngineRequest> requests = Requests();
  StepCounter plain, spec;
  const std::vector<Stream> off = Run(requests, 0, &plain);
  const std::vector<Stream> on = Run(requests, 4, &spec, 256, graphs->get());
  ExpectSameStreams(off, on, requests);
  EXPECT_GT(spec.accepted, 0);
  EXPECT_GT((*graphs)->step_graph_stats().replayed, 0) << "no decode step ran from a graph";
}

TEST_F(SpeculativeTest, AFailedStepEndsEveryRequestWithItsError) {
  // Mid-decode (drafts in flight) and at the first step: every stream ends with the error, none
  // hangs, the engine does not crash, and every KV block comes back.
  for (const int fail_from : {1, 4}) {
    for (const int32_t k : {0, 4}) {
      SCOPED_TRACE(testing::Message() << "fail from step " << fail_from << ", k " << k);
      FailingStepRunner failing(runner_, fail_from);
      EngineConfig config;
      config.scheduler.block_size = 4;
      config.scheduler.num_blocks = 256;
      config.scheduler.max_total_tokens = 256;
      config.speculative.num_speculative_tokens = k;
      config.speculative_max_running = 64;
      auto engine = Engine::Create(&failing, tokenizer_, config);
      ASSERT_TRUE(engine.ok()) << engine.status();
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const EngineRequest& r : Requests()) {
        auto stream = (*engine)->Submit(r);
        ASSERT_TRUE(stream.ok()) << stream.status();
        streams.push_back(*stream);
      }
      for (auto& stream : streams) {
        EngineEvent e, last;
        while (stream->Next(&e)) last = e;
        ASSERT_TRUE(last.finished);
        if (last.finish_reason == FinishReason::kError) {
          EXPECT_NE(std::string(last.status.message()).find("a peer died"), std::string::npos)
              << last.status;
        }
      }
      EXPECT_EQ((*engine)->scheduler_stats().blocks_used, 0);
      EXPECT_EQ((*engine)->num_unfinished(), 0);
    }
  }
}

TEST_F(SpeculativeTest, RejectsABadConfig) {
  EngineConfig config;
  config.scheduler.num_blocks = 8;
  config.speculative.num_speculative_tokens = 4;
  config.speculative.lookup_min = 0;
  auto engine = Engine::Create(runner_, tokenizer_, config);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("lookup_min"), std::string::npos);
  config.speculative.lookup_min = 1;
  config.speculative_max_running = -1;
  engine = Engine::Create(runner_, tokenizer_, config);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("speculative_max_running"), std::string::npos);
}

}  // namespace
}  // namespace blossom
