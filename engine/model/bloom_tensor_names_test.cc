#include "engine/model/bloom_tensor_names.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/loader/safetensors_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BloomTensorNamesTest, ListsEveryWeightOfEveryLayerOnce) {
  BloomConfig config;
  config.n_layer = 2;
  const std::vector<std::string> names = BloomTensorNames(config);
  EXPECT_EQ(names.size(), 6u + 2 * 12);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const char* name : {"h.1.mlp.dense_4h_to_h.bias", "h.0.self_attention.query_key_value.weight",
                           "lm_head.weight", "word_embeddings_layernorm.bias"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  // A layer past n_layer is not a BLOOM weight of this config.
  EXPECT_EQ(std::find(names.begin(), names.end(), "h.2.input_layernorm.weight"), names.end());
}

class UnexpectedTensorsTest : public ::testing::Test {
 protected:
  // A one-layer checkpoint: ln_f and two layer-0 tensors (spelled with the "transformer." prefix),
  // plus `extra` tensor names. The checkpoint layer does not need the full set.
  std::unique_ptr<Checkpoint> Open(const std::vector<std::string>& extra) {
    const std::string dir = test_util::FreshTestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::vector<test_util::TestTensor> tensors = {
        {"transformer.ln_f.weight", "F32", {2}, test_util::F32Bytes({1, 1})},
        {"transformer.h.0.input_layernorm.bias", "F32", {2}, test_util::F32Bytes({0, 0})},
        {"lm_head.weight", "F32", {4, 2}, test_util::F32Bytes({0, 1, 2, 3, 4, 5, 6, 7})},
    };
    for (const std::string& name : extra) {
      tensors.push_back({name, "F32", {1}, test_util::F32Bytes({0})});
    }
    EXPECT_TRUE(test_util::WriteTestFile(dir + "/config.json",
                                         test_util::TinyBloomConfigJson(4, 2, 1, 1))
                    .ok());
    EXPECT_TRUE(test_util::WriteTestFile(dir + "/model.safetensors",
                                         test_util::BuildSafetensors(tensors))
                    .ok());
    absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    return checkpoint.ok() ? std::move(*checkpoint) : nullptr;
  }
};

TEST_F(UnexpectedTensorsTest, NoneInACleanCheckpoint) {
  std::unique_ptr<Checkpoint> checkpoint = Open({});
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_TRUE(UnexpectedTensors(*checkpoint).empty());
  EXPECT_TRUE(CheckUnexpectedTensors(*checkpoint, /*strict=*/true, /*log=*/true).ok());
}

TEST_F(UnexpectedTensorsTest, FindsExtraHeadsAndLayersPastTheConfig) {
  std::unique_ptr<Checkpoint> checkpoint =
      Open({"score.weight", "transformer.h.1.input_layernorm.weight", "h.0.attn.rotary.inv_freq"});
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_THAT(UnexpectedTensors(*checkpoint),
              ElementsAre("h.0.attn.rotary.inv_freq", "h.1.input_layernorm.weight",
                          "score.weight"));
  // Not strict: logged, accepted.
  EXPECT_TRUE(CheckUnexpectedTensors(*checkpoint, /*strict=*/false, /*log=*/true).ok());
  // Strict: refused, naming the checkpoint and every tensor.
  const absl::Status strict = CheckUnexpectedTensors(*checkpoint, /*strict=*/true, /*log=*/true);
  EXPECT_EQ(strict.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(strict.message()),
              AllOf(HasSubstr(checkpoint->model_dir()), HasSubstr("3 tensor(s)"),
                    HasSubstr("score.weight"), HasSubstr("h.1.input_layernorm.weight"),
                    HasSubstr("h.0.attn.rotary.inv_freq"), HasSubstr("strict")));
}

}  // namespace
}  // namespace blossom
