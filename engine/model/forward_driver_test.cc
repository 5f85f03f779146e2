#include "engine/model/forward_driver.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

TEST(ScatteredBlocksTest, EverySequenceGetsItsOwnBlocks) {
  const ScatteredBlocks blocks{3, 4};
  std::set<int32_t> seen;
  for (int32_t s = 0; s < blocks.num_seqs; ++s) {
    for (int32_t b : blocks.TableFor(s)) {
      EXPECT_GE(b, 0);
      EXPECT_LT(b, blocks.total());
      EXPECT_TRUE(seen.insert(b).second) << "block " << b << " handed out twice";
    }
  }
  EXPECT_EQ(static_cast<int32_t>(seen.size()), blocks.total());
}

class ForwardDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = BloomModel::Load(FixturePath("models/bloom-tiny-h4"), &backend_, nullptr);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    golden_ = nlohmann::json::parse(ReadFileOrEmpty(FixturePath("goldens/bloom-tiny-h4/golden.json")), nullptr,
                                    false);
    ASSERT_FALSE(golden_.is_discarded());
  }
  CpuBackend backend_{2};
  std::unique_ptr<BloomModel> model_;
  nlohmann::json golden_;
};

TEST_F(ForwardDriverTest, GreedyMatchesTheGoldensAndRecordsTheLogitsOfEveryChoice) {
  std::vector<std::vector<int32_t>> prompts, expected;
  for (const auto& item : golden_["greedy"]) {
    prompts.push_back(item["input_ids"].get<std::vector<int32_t>>());
    expected.push_back(item["new_ids"].get<std::vector<int32_t>>());
  }
  ASSERT_FALSE(prompts.empty());
  const int new_tokens = static_cast<int>(expected[0].size());
  ForwardDriver driver(model_.get(), /*block_size=*/4);
  auto result = driver.Greedy(prompts, new_tokens, /*keep_step_logits=*/true);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, expected);
  const int64_t V = model_->vocab_size();
  ASSERT_EQ(result->step_logits.size(), static_cast<size_t>(new_tokens) * prompts.size() * V);
  // Each recorded row's argmax is the token chosen at that step.
  for (int step = 0; step < new_tokens; ++step) {
    for (size_t p = 0; p < prompts.size(); ++p) {
      const float* row = result->step_logits.data() + (step * prompts.size() + p) * V;
      EXPECT_EQ(std::max_element(row, row + V) - row, result->tokens[p][step]) << "prompt " << p << " step " << step;
    }
  }
  // Step 0's row is the prefill's last row.
  auto prefill = driver.Prefill({prompts[0]});
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  const std::vector<float>& all = (*prefill)[0];
  ASSERT_EQ(all.size(), prompts[0].size() * V);
  EXPECT_TRUE(std::equal(all.end() - V, all.end(), result->step_logits.begin()));
}

TEST_F(ForwardDriverTest, ChunkedPrefillEqualsOneShot) {
  const std::vector<int32_t> ids = golden_["logits"].back()["input_ids"].get<std::vector<int32_t>>();
  ForwardDriver driver(model_.get(), 4);
  const ScatteredBlocks blocks{static_cast<int32_t>(ids.size() / 4 + 1), 1};
  auto c1 = model_->CreateKvCache(blocks.total(), 4);
  auto c2 = model_->CreateKvCache(blocks.total(), 4);
  ASSERT_TRUE(c1.ok() && c2.ok());
  auto whole = driver.Prefill({ids}, ids.size(), c1->get(), blocks);
  auto chunked = driver.Prefill({ids}, 3, c2->get(), blocks);
  ASSERT_TRUE(whole.ok() && chunked.ok());
  EXPECT_EQ((*whole)[0], (*chunked)[0]);  // the CPU backend is batch- and chunk-invariant
}

TEST_F(ForwardDriverTest, AnEmptyPromptIsRefused) {
  ForwardDriver driver(model_.get(), /*block_size=*/4);
  auto result = driver.Greedy({{1, 2}, {}}, 2, false);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blossom
