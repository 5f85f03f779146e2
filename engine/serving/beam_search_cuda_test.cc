// Beam search on the CUDA backend (the GPU sampler's top logprobs, captured decode graphs)
// against Hugging Face's generate(num_beams=...) goldens, as beam_search_test does on the CPU:
// the same sequences, token for token, in fp32. The CUDA fp32 forward is within 2e-5 of HF's
// fp64 evaluation (bloom_cuda_test: 1.96e-5 on bloom-tiny-h4, H200, 2026-11-26), so a token's
// logprob may differ from HF's by a few 1e-5: the sums are compared to 1e-4 a token. A case
// whose beam selection turns on a smaller margin than that is left out (named below, with its
// margin): the GPU may rightly keep the other candidate there. Without a GPU it reports
// SKIPPED with the reason.
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
      int index = 0;
      for (const nlohmann::json& c : golden["cases"]) {
        // bloom-tiny-h4 case 17: at step 7 the third candidate (kept) leads the fourth (dropped)
        // by 1.67e-5 in fp64 (HF's fp32: 1.34e-5), under the GPU's per-token error; raising
        // the fourth by 3e-5 changes the first returned sequence. (Case 19 has the same margin
        // but the same output either way.) Found by replaying HF's search with perturbations.
        if (model == "bloom-tiny-h4" && index == 17) {
          ++index;
          continue;
        }
        SCOPED_TRACE(::testing::Message() << model << " case " << index++
                                          << (graphs ? " with step graphs" : ""));
        beam_testing::ExpectGoldenCase(engine->get(), c, 1e-4);
      }
      EXPECT_EQ((*engine)->num_unfinished(), 0);
    }
  }
#endif
}

}  // namespace
}  // namespace blossom
