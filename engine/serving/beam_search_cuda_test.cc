// Beam search on the CUDA backend (the GPU sampler's top logprobs, captured decode graphs)
// against Hugging Face's generate(num_beams=...) goldens, as beam_search_test does on the CPU:
// the same sequences, token for token, in fp32. The CUDA fp32 forward is within 2e-5 of HF's
// fp64 evaluation (bloom_cuda_test: 1.96e-5 on bloom-tiny-h4, H200, 2026-11-26), so a token's
// logprob may differ from HF's by up to twice that (the logit and the log-sum-exp): the sums are
// compared to kScoreTolerance a token. A case that a per-token error of kGpuLogprobError could
// decide otherwise (its golden's selection_margin, from tests/fixtures/fixture_beam_margin.py)
// is left out: the GPU may rightly answer it otherwise. Without a GPU it reports SKIPPED with
// the reason.
#include <memory>
#include <string>

#include "engine/model/model_runner.h"
#include "engine/serving/beam_search_test_util.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace blossom {
namespace {

// Score error allowed a token; and the per-token logprob error the GPU may have (twice the
// measured logit error), which a compared case's selection margin must exceed.
constexpr double kScoreTolerance = 1e-4;
constexpr double kGpuLogprobError = 4e-5;

TEST(BeamSearchCudaTest, SequencesAreHuggingFacesOnTheGpu) {
#ifndef BLOSSOM_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
  for (const std::string model : {"bloom-tiny-h4", "bloom-demo"}) {
    const std::string dir = FixturePath("models/" + model);
    auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    const nlohmann::json golden = beam_testing::LoadGoldens(model);
    ASSERT_FALSE(golden.is_discarded());
    for (const bool graphs : {false, true}) {
      ModelRunnerOptions options;
      options.model_dir = dir;
      options.backend = "cuda";
      options.prefetch = false;
      options.step_graphs = graphs;
      auto runner = ModelRunner::Create(options);
      ASSERT_TRUE(runner.ok()) << runner.status();
      EngineConfig config;
      config.kv_cache_bytes = 16 << 20;
      auto engine = Engine::Create(runner->get(), tokenizer->get(), config);
      ASSERT_TRUE(engine.ok()) << engine.status();
      int index = 0, compared = 0;
      for (const nlohmann::json& c : golden["cases"]) {
        // bloom-tiny-h4 cases 17 and 19 are the two under it (9.5e-7 a token: at step 8 the
        // third candidate, kept, leads the fourth by 1.53e-5 over 8 tokens each).
        if (!beam_testing::DecidedBeyond(c, kGpuLogprobError)) {
          ++index;
          continue;
        }
        SCOPED_TRACE(::testing::Message() << model << " case " << index++
                                          << (graphs ? " with step graphs" : ""));
        beam_testing::ExpectGoldenCase(engine->get(), c, kScoreTolerance);
        ++compared;
      }
      // (BeamSearchGoldenTest.MostCasesAreDecidedBeyondTheGpusError holds the goldens to
      // leaving out at most two cases a model.)
      EXPECT_GE(compared, 19) << model;
      EXPECT_EQ((*engine)->num_unfinished(), 0);
    }
  }
#endif
}

}  // namespace
}  // namespace blossom
