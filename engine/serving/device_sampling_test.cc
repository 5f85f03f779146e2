// EngineConfig::device_sampling on the CPU backend: the same requests (greedy, seeded sampling,
// penalties, typical-p / min-p, min_new_tokens, token logprobs with top_n, prompt logprobs) give
// bit-identical tokens, logprobs and prompt logprobs with the logits kept where the runner left
// them and with every step's logits copied to the host (the path before device sampling), for a
// single-rank runner and the two-rank threads runner.
//
// A third run wraps the runner so that its kept logits claim to be device memory: the engine must
// then sample and score (prompt logprobs) them only through the runner's sampler, and copy no
// row to the host.
#include <memory>
#include <string>
#include <vector>

#include "engine/model/pretend_device_runner.h"
#include "engine/serving/engine.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::vector<PromptLogprob> prompt_logprobs;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
};

class DeviceSamplingTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const std::string dir = FixturePath("models/bloom-tiny-h4");
    auto tok = Tokenizer::FromFile(dir + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    if (GetParam() == 1) {
      auto model = BloomModel::Load(dir, &backend_, nullptr);
      ASSERT_TRUE(model.ok()) << model.status();
      model_ = std::move(*model);
      runner_ = ModelRunner::ForModel(model_.get());
    } else {
      ModelRunnerOptions options;
      options.model_dir = dir;
      options.tensor_parallel_size = GetParam();
      options.threads_per_rank = 1;
      options.prefetch = false;
      auto runner = ModelRunner::Create(options);
      ASSERT_TRUE(runner.ok()) << runner.status();
      runner_ = std::move(*runner);
    }
  }

  std::vector<EngineRequest> Requests() const {
    std::vector<EngineRequest> all;
    auto add = [&](const std::string& prompt, int32_t n) -> EngineRequest& {
      EngineRequest r;
      r.prompt_tokens = *tokenizer_->Encode(prompt);
      r.stopping.max_new_tokens = n;
      r.stopping.ignore_eos = true;
      all.push_back(std::move(r));
      return all.back();
    };
    add("Hello world, this is", 12).sampling.temperature = 0.0f;  // greedy
    {
      EngineRequest& r = add("The quick brown fox", 16);
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 7;
    }
    {
      EngineRequest& r = add("Peace is the only way", 16);
      r.sampling.temperature = 0.7f;
      r.sampling.repetition_penalty = 1.3f;
      r.sampling.frequency_penalty = 0.4f;
      r.sampling.presence_penalty = 0.3f;
      r.sampling.seed = 11;
    }
    {
      EngineRequest& r = add("A prompt whose every token is scored", 6);
      r.sampling.temperature = 0.0f;
      r.sampling.prompt_logprobs = 3;
      r.sampling.logprobs = 2;
    }
    {
      EngineRequest& r = add("Logprobs of the chosen token and the top five", 10);
      r.sampling.temperature = 1.0f;
      r.sampling.typical_p = 0.9f;
      r.sampling.min_p = 0.05f;
      r.sampling.logprobs = 5;
      r.sampling.seed = 3;
    }
    {
      EngineRequest& r = add("Stop only after", 8);
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 5;
      r.sampling.prompt_logprobs = 0;
      r.stopping.ignore_eos = false;
      r.stopping.min_new_tokens = 4;  // suppresses EOS for the first tokens
    }
    return all;
  }

  // Every request of Requests() through one engine on `runner`, submitted together.
  std::vector<Outcome> RunAll(ModelRunner* runner, bool device_sampling) {
    EngineConfig config;
    config.scheduler.block_size = 4;
    config.scheduler.num_blocks = 128;
    config.scheduler.max_total_tokens = 256;
    config.device_sampling = device_sampling;
    auto engine = Engine::Create(runner, tokenizer_.get(), config);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return {};
    const std::vector<EngineRequest> requests = Requests();
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const EngineRequest& r : requests) {
      auto stream = (*engine)->Submit(r);
      EXPECT_TRUE(stream.ok()) << stream.status();
      if (!stream.ok()) return {};
      streams.push_back(*stream);
    }
    std::vector<Outcome> outcomes(requests.size());
    for (size_t i = 0; i < streams.size(); ++i) {
      EngineEvent e;
      while (streams[i]->Next(&e)) {
        EXPECT_TRUE(e.status.ok()) << "request " << i << ": " << e.status;
        Outcome& o = outcomes[i];
        if (e.has_token) {
          o.tokens.push_back(e.token.token);
          o.logprobs.push_back(e.token.logprob);
          o.top.push_back(e.token.top_logprobs);
          o.text += e.token.text_delta;
        }
        if (!e.prompt_logprobs.empty()) o.prompt_logprobs = e.prompt_logprobs;
        if (e.finished) o.finish_reason = e.finish_reason;
      }
    }
    return outcomes;
  }

  static void ExpectIdentical(const std::vector<Outcome>& got, const std::vector<Outcome>& want,
                              const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const Outcome &g = got[i], &w = want[i];
      SCOPED_TRACE(what + ", request " + std::to_string(i));
      EXPECT_EQ(g.tokens, w.tokens);
      EXPECT_EQ(g.text, w.text);
      EXPECT_EQ(g.finish_reason, w.finish_reason);
      EXPECT_EQ(g.logprobs, w.logprobs);  // bit for bit
      ASSERT_EQ(g.top.size(), w.top.size());
      for (size_t t = 0; t < g.top.size(); ++t) {
        ASSERT_EQ(g.top[t].size(), w.top[t].size());
        for (size_t j = 0; j < g.top[t].size(); ++j) {
          EXPECT_EQ(g.top[t][j].token, w.top[t][j].token);
          EXPECT_EQ(g.top[t][j].logprob, w.top[t][j].logprob);
        }
      }
      ASSERT_EQ(g.prompt_logprobs.size(), w.prompt_logprobs.size());
      for (size_t p = 0; p < g.prompt_logprobs.size(); ++p) {
        const PromptLogprob &gp = g.prompt_logprobs[p], &wp = w.prompt_logprobs[p];
        EXPECT_EQ(gp.token, wp.token);
        EXPECT_EQ(gp.logprob, wp.logprob);
        ASSERT_EQ(gp.top.size(), wp.top.size());
        for (size_t j = 0; j < gp.top.size(); ++j) {
          EXPECT_EQ(gp.top[j].token, wp.top[j].token);
          EXPECT_EQ(gp.top[j].logprob, wp.top[j].logprob);
        }
      }
    }
  }

  CpuBackend backend_{1};
  std::unique_ptr<BloomModel> model_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(DeviceSamplingTest, OnAndOffGiveIdenticalResults) {
  const std::vector<Outcome> host = RunAll(runner_.get(), /*device_sampling=*/false);
  const std::vector<Outcome> kept = RunAll(runner_.get(), /*device_sampling=*/true);
  ASSERT_EQ(host.size(), Requests().size());
  // The comparison means something: every request produced tokens, the logprob requests got
  // them, and the prompt-logprob requests got one entry per prompt token after the first.
  const std::vector<EngineRequest> requests = Requests();
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_FALSE(host[i].tokens.empty()) << i;
    if (requests[i].sampling.prompt_logprobs >= 0) {
      EXPECT_EQ(host[i].prompt_logprobs.size(), requests[i].prompt_tokens.size() - 1) << i;
    }
    if (requests[i].sampling.logprobs > 0) {
      EXPECT_EQ(host[i].top[0].size(), static_cast<size_t>(requests[i].sampling.logprobs)) << i;
    }
  }
  ExpectIdentical(kept, host, "device_sampling on vs off");
}

TEST_P(DeviceSamplingTest, DeviceLogitsAreSampledAndScoredInPlace) {
  const std::vector<Outcome> host = RunAll(runner_.get(), /*device_sampling=*/false);
  PretendDeviceRunner device(runner_.get());
  const std::vector<Outcome> on_device = RunAll(&device, /*device_sampling=*/true);
  ExpectIdentical(on_device, host, "pretend-device logits vs host logits");
  int64_t prompt_rows = 0, generated = 0;
  const std::vector<EngineRequest> requests = Requests();
  for (size_t i = 0; i < requests.size(); ++i) {
    // One prefill chunk each (the step budget holds every prompt), no prefix-cache hits for
    // them (prompt logprobs skip the cache): each prompt token after the first is scored once.
    if (requests[i].sampling.prompt_logprobs >= 0) {
      prompt_rows += static_cast<int64_t>(requests[i].prompt_tokens.size()) - 1;
    }
    generated += static_cast<int64_t>(host[i].tokens.size());
  }
  ASSERT_GT(prompt_rows, 0) << "the requests must include prompt logprobs";
  EXPECT_EQ(device.host_forwards.load(), 0) << "no step copies its logits to the host";
  EXPECT_EQ(device.copied_rows.load(), 0) << "prompt rows are scored where they lie";
  EXPECT_EQ(device.scored_rows.load(), prompt_rows);
  EXPECT_EQ(device.sampled_rows.load(), generated);
}

TEST_P(DeviceSamplingTest, OffUsesTheHostPathOnly) {
  PretendDeviceRunner device(runner_.get());
  RunAll(&device, /*device_sampling=*/false);
  EXPECT_GT(device.host_forwards.load(), 0);
  EXPECT_EQ(device.copied_rows.load(), 0);
  EXPECT_EQ(device.sampled_rows.load(), 0) << "the runner's sampler is not used";
  EXPECT_EQ(device.scored_rows.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Runners, DeviceSamplingTest, ::testing::Values(1, 2),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

}  // namespace
}  // namespace blossom
