// --lora-adapter against PEFT, the oracle: bloom-tiny-h4 with each adapter PEFT saved for it
// (tests/fixtures/fixture_lora.py) merged at load gives PEFT's unmerged float32 logits
// (PeftModel.from_pretrained, base(x) + B(A(x)) * scale) and its greedy continuations, on one
// rank and split over two tensor-parallel ranks (row- and column-parallel slices of the merge).
//
// Tolerance: merged and unmerged are two float32 evaluations in different orders; PEFT's own
// merge_and_unload differs from its forward by peft_merged_vs_unmerged_max_abs (lora.json), so
// the engine is held to max(2e-4, 4 x that). Every comparison fails on NaN or infinity. Greedy:
// token-identical (the goldens record every step's top-2 margin, at least 0.005 here).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/loader/safetensors.h"
#include "engine/model/model_runner.h"
#include "engine/model/tp_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

struct LoraCase {
  std::string adapter;
  int tp;
};

std::string CaseName(const ::testing::TestParamInfo<LoraCase>& info) {
  std::string name = info.param.adapter + "_tp" + std::to_string(info.param.tp);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class LoraAgainstPeft : public ::testing::TestWithParam<LoraCase> {
 protected:
  void SetUp() override {
    const std::string golden_dir = FixturePath("goldens/" + GetParam().adapter);
    golden_ = nlohmann::json::parse(ReadFileOrEmpty(golden_dir + "/lora.json"), nullptr, false);
    ASSERT_FALSE(golden_.is_discarded()) << golden_dir << "/lora.json";
    auto file = SafetensorsFile::Open(golden_dir + "/lora.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    logits_ = std::move(*file);
    ModelRunnerOptions options;
    options.model_dir = FixturePath("models/bloom-tiny-h4");
    options.lora_adapter = FixturePath("models/" + GetParam().adapter);
    options.tensor_parallel_size = GetParam().tp;
    options.threads_per_rank = 1;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
  }

  std::vector<float> GoldenLogits(const std::string& name) {
    const TensorEntry* entry = logits_->Find(name);
    EXPECT_NE(entry, nullptr) << name;
    if (entry == nullptr) return {};
    auto view = logits_->View(*entry);
    EXPECT_TRUE(view.ok()) << view.status();
    if (!view.ok()) return {};
    const float* p = view->as<const float>();
    return std::vector<float>(p, p + view->numel());
  }

  nlohmann::json golden_;
  std::unique_ptr<SafetensorsFile> logits_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(LoraAgainstPeft, LogitsMatchPeft) {
  const double tolerance =
      std::max(2e-4, 4.0 * golden_["peft_merged_vs_unmerged_max_abs"].get<double>());
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& item : golden_["logits"]) {
    prompts.push_back(item["input_ids"].get<std::vector<int32_t>>());
  }
  ASSERT_EQ(prompts.size(), 3u);
  const std::vector<std::vector<float>> got = tp_test::PrefillAll(*runner_, prompts);
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string name = golden_["logits"][i]["name"].get<std::string>();
    const std::vector<float> want = GoldenLogits(name);
    const float diff = tp_test::MaxAbsDiff(got[i], want);
    EXPECT_LE(diff, tolerance) << name;
    RecordProperty("max_abs_diff_" + name, std::to_string(diff));  // in the test's XML
  }
  // Not the base model: an engine that ignored the adapter would be this far off.
  EXPECT_GT(golden_["max_abs_change_from_base"].get<double>(), 100 * tolerance);
}

TEST_P(LoraAgainstPeft, GreedyMatchesPeft) {
  std::vector<std::vector<int32_t>> prompts, want;
  for (const auto& item : golden_["greedy"]) {
    prompts.push_back(item["input_ids"].get<std::vector<int32_t>>());
    want.push_back(item["new_ids"].get<std::vector<int32_t>>());
  }
  ASSERT_EQ(prompts.size(), 4u);
  EXPECT_EQ(tp_test::GreedyAll(*runner_, prompts, static_cast<int>(want[0].size())), want);
}

INSTANTIATE_TEST_SUITE_P(Adapters, LoraAgainstPeft,
                         ::testing::Values(LoraCase{"bloom-tiny-h4-lora", 1},
                                           LoraCase{"bloom-tiny-h4-lora", 2},
                                           LoraCase{"bloom-tiny-h4-rslora", 1},
                                           LoraCase{"bloom-tiny-h4-rslora", 4}),
                         CaseName);

TEST(LoraLoadTest, AnAdapterOfAnotherModelIsRefusedNamingTheTensor) {
  // bloom-tiny-h6 has hidden size 96: bloom-tiny-h4's adapter (64) cannot be merged into it.
  ModelRunnerOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h6");
  options.lora_adapter = FixturePath("models/bloom-tiny-h4-lora");
  options.threads_per_rank = 1;
  auto runner = ModelRunner::Create(options);
  ASSERT_FALSE(runner.ok());
  EXPECT_NE(runner.status().ToString().find("is this an adapter of another model?"),
            std::string::npos)
      << runner.status();
}

}  // namespace
}  // namespace blossom
