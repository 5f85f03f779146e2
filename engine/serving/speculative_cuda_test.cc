// Speculative decoding on the CUDA backend (GPU sampler, captured decode graphs): the same greedy
// streams as without it. On a GPU a row's logits may differ in the last bits between a one-token
// decode step and a verification chunk (cuBLASLt picks kernels by M), so this asserts the tokens
// of greedy fp32 runs (as bloom_cuda_test does for its fp32 forwards) and logprobs within 1e-4,
// not bits. Without a GPU it reports SKIPPED with the reason.
#include <memory>
#include <string>
#include <vector>

#include "engine/serving/engine.h"
#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace blossom {
namespace {

struct Counts : EngineObserver {
  void OnStep(const StepStats& s) override {
    drafts += s.draft_tokens;
    accepted += s.accepted_draft_tokens;
  }
  int64_t drafts = 0, accepted = 0;  // engine thread only; read after the engine is gone
};

struct Stream {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

[[maybe_unused]] std::vector<Stream> RunRequests(ModelRunner* runner, const Tokenizer* tokenizer,
                                                 int32_t k, Counts* counts) {
  EngineConfig config;
  config.scheduler.block_size = 16;
  config.scheduler.num_blocks = 64;
  config.scheduler.max_total_tokens = 256;
  config.speculative.num_speculative_tokens = k;
  config.speculative_max_running = 64;
  std::vector<Stream> out;
  auto engine = Engine::Create(runner, tokenizer, config, counts);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return out;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < 6; ++i) {
    EngineRequest r;
    // Prompts that repeat themselves, so that lookup drafts from the first step.
    for (int32_t t = 0; t < 12 + 3 * i; ++t)
      r.prompt_tokens.push_back(100 + (i * 37 + (t % (3 + i % 3)) * 11) % 900);
    r.sampling.temperature = 0.0f;
    r.sampling.logprobs = i % 2 == 0 ? 2 : -1;
    r.stopping.max_new_tokens = 40;
    r.stopping.ignore_eos = true;
    auto stream = (*engine)->Submit(r);
    EXPECT_TRUE(stream.ok()) << stream.status();
    if (stream.ok()) streams.push_back(*stream);
  }
  for (auto& stream : streams) {
    Stream s;
    EngineEvent e;
    while (stream->Next(&e)) {
      EXPECT_TRUE(e.status.ok()) << e.status;
      if (!e.has_token) continue;
      s.tokens.push_back(e.token.token);
      s.logprobs.push_back(e.token.logprob);
    }
    out.push_back(std::move(s));
  }
  return out;
}

TEST(SpeculativeCudaTest, GreedyStreamsMatchWithAndWithoutDrafts) {
#ifndef BLOSSOM_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
  const std::string dir = FixturePath("models/bloom-tiny-h4");
  auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  for (const bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "step graphs" : "no step graphs");
    ModelRunnerOptions options;
    options.model_dir = dir;
    options.backend = "cuda";
    options.prefetch = false;
    options.step_graphs = graphs;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    Counts plain, spec;
    const std::vector<Stream> off = RunRequests(runner->get(), tokenizer->get(), 0, &plain);
    const std::vector<Stream> on = RunRequests(runner->get(), tokenizer->get(), 4, &spec);
    ASSERT_EQ(off.size(), on.size());
    for (size_t i = 0; i < off.size(); ++i) {
      EXPECT_EQ(off[i].tokens, on[i].tokens) << "request " << i;
      ASSERT_EQ(off[i].logprobs.size(), on[i].logprobs.size());
      for (size_t t = 0; t < off[i].logprobs.size(); ++t) {
        EXPECT_NEAR(off[i].logprobs[t], on[i].logprobs[t], 1e-4f)
            << "request " << i << " token " << t;
      }
    }
    EXPECT_EQ(plain.drafts, 0);
    EXPECT_GT(spec.accepted, 0) << "no draft accepted: the comparison would be vacuous";
  }
#endif
}

}  // namespace
}  // namespace blossom
