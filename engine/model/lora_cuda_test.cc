// --lora-adapter on the CUDA backend against PEFT (as engine/model:bloom_model_lora_test on the
// CPU): the merged blocks are uploaded from host copies (BloomModel::ImportMerged), a path no
// checkpoint without an adapter takes. Without a GPU it reports SKIPPED with the reason.
//
// Tolerance: the CPU test's bound, max(2e-4, 4 x PEFT's own merged-vs-unmerged gap), doubled,
// since cuBLAS picks its own summation orders and tile splits (as tests/gpu/bloom_cuda_test
// doubles its fp32 bound); every comparison fails on NaN or infinity. Greedy continuations:
// token-identical to PEFT's (their top-2 margins are at least 0.005). Measured errors are
// printed as "BLOSSOM_OP_ERROR {...}" lines for tools/gpu/run_on_device.sh.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/loader/safetensors.h"
#include "engine/model/model_runner.h"
#include "engine/model/tp_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace blossom {
namespace {

TEST(LoraCudaTest, MergedAdaptersGivePeftsLogitsOnTheGpu) {
#ifndef BLOSSOM_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  const cuda::DeviceQuery q = cuda::QueryDevices();
  if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
  for (const std::string adapter : {"bloom-tiny-h4-lora", "bloom-tiny-h4-rslora"}) {
    SCOPED_TRACE(adapter);
    const std::string golden_dir = FixturePath("goldens/" + adapter);
    const nlohmann::json golden =
        nlohmann::json::parse(ReadFileOrEmpty(golden_dir + "/lora.json"), nullptr, false);
    ASSERT_FALSE(golden.is_discarded()) << golden_dir << "/lora.json";
    auto logits = SafetensorsFile::Open(golden_dir + "/lora.safetensors");
    ASSERT_TRUE(logits.ok()) << logits.status();
    ModelRunnerOptions options;
    options.model_dir = FixturePath("models/bloom-tiny-h4");
    options.lora_adapter = FixturePath("models/" + adapter);
    options.backend = "cuda";
    options.prefetch = false;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();

    const double tolerance =
        2.0 * std::max(2e-4, 4.0 * golden["peft_merged_vs_unmerged_max_abs"].get<double>());
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& item : golden["logits"]) {
      prompts.push_back(item["input_ids"].get<std::vector<int32_t>>());
    }
    const std::vector<std::vector<float>> got = tp_test::PrefillAll(**runner, prompts);
    ASSERT_EQ(got.size(), prompts.size());
    float worst = 0.0f;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const TensorEntry* entry = (*logits)->Find(golden["logits"][i]["name"].get<std::string>());
      ASSERT_NE(entry, nullptr);
      auto view = (*logits)->View(*entry);
      ASSERT_TRUE(view.ok()) << view.status();
      const float* p = view->as<const float>();
      const float diff = tp_test::MaxAbsDiff(got[i], std::vector<float>(p, p + view->numel()));
      EXPECT_LE(diff, tolerance) << golden["logits"][i]["name"];
      worst = std::max(worst, diff);
    }
    std::printf("BLOSSOM_OP_ERROR {\"op\": \"lora.prefill_logits_vs_peft/%s\", \"max_abs\": %.3g, "
                "\"max_over_tolerance\": %.3g, \"cases\": %zu}\n",
                adapter.c_str(), worst, worst / tolerance, prompts.size());

    std::vector<std::vector<int32_t>> greedy_prompts, want;
    for (const auto& item : golden["greedy"]) {
      greedy_prompts.push_back(item["input_ids"].get<std::vector<int32_t>>());
      want.push_back(item["new_ids"].get<std::vector<int32_t>>());
    }
    EXPECT_EQ(tp_test::GreedyAll(**runner, greedy_prompts, static_cast<int>(want[0].size())),
              want);
  }
#endif
}

}  // namespace
}  // namespace blossom
