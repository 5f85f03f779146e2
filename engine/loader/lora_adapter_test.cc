// LoraAdapter: the adapters PEFT saved for bloom-tiny-h4 (tests/fixtures/fixture_lora.py) load
// with PEFT's scale, B @ A is added to any slice of a weight, and every adapter a merge cannot
// express is refused naming the setting or tensor. The merged model against PEFT's logits is
// engine/model:bloom_model_lora_test.
#include "engine/loader/lora_adapter.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/loader/file_util.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors_test_util.h"
#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

using test_util::BuildSafetensors;
using test_util::F32Bytes;
using test_util::BF16Bytes;
using test_util::FreshTestDir;
using test_util::TestTensor;
using test_util::WriteTestFile;

BloomConfig TinyH4() {
  absl::StatusOr<BloomConfig> config = LoadBloomConfig(FixturePath("models/bloom-tiny-h4"));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : BloomConfig{};
}

TEST(LoraAdapterTest, LoadsPeftsAdaptersWithTheirScale) {
  auto lora = LoraAdapter::Load(FixturePath("models/bloom-tiny-h4-lora"), TinyH4());
  ASSERT_TRUE(lora.ok()) << lora.status();
  EXPECT_EQ((*lora)->rank(), 4);
  EXPECT_FLOAT_EQ((*lora)->scale(), 2.0f);  // lora_alpha 8 / r 4
  EXPECT_EQ((*lora)->changed_weights().size(), 8u);  // 4 Linear layers x 2 layers
  EXPECT_TRUE((*lora)->Changes("h.1.mlp.dense_4h_to_h.weight"));
  EXPECT_FALSE((*lora)->Changes("h.1.mlp.dense_4h_to_h.bias"));

  auto rslora = LoraAdapter::Load(FixturePath("models/bloom-tiny-h4-rslora"), TinyH4());
  ASSERT_TRUE(rslora.ok()) << rslora.status();
  EXPECT_FLOAT_EQ((*rslora)->scale(), static_cast<float>(3.0 / std::sqrt(2.0)));  // use_rslora
  EXPECT_EQ((*rslora)->changed_weights(),
            (std::vector<std::string>{"h.1.mlp.dense_4h_to_h.weight",
                                      "h.1.self_attention.query_key_value.weight"}));
}

// A small adapter written here: one Linear (dense, [4, 4]) with r = 1, so B @ A is known.
class HandMadeAdapter : public ::testing::Test {
 protected:
  void Write(const std::string& config_json, const std::vector<TestTensor>& tensors) {
    ASSERT_TRUE(WriteTestFile(dir_ + "/adapter_config.json", config_json).ok());
    ASSERT_TRUE(WriteTestFile(dir_ + "/adapter_model.safetensors", BuildSafetensors(tensors)).ok());
  }
  std::string Error(const BloomConfig& config) {
    auto lora = LoraAdapter::Load(dir_, config);
    EXPECT_FALSE(lora.ok());
    return lora.ok() ? "" : std::string(lora.status().message());
  }
  static BloomConfig Hidden4() {
    BloomConfig c;
    c.vocab_size = 16;
    c.hidden_size = 4;
    c.n_layer = 2;
    c.n_head = 2;
    return c;
  }
  static constexpr char kConfig[] =
      R"({"peft_type": "LORA", "r": 1, "lora_alpha": 2, "bias": "none",
          "target_modules": ["dense"], "modules_to_save": null, "rank_pattern": {}})";
  const std::vector<TestTensor> dense_ = {
      {"base_model.model.transformer.h.1.self_attention.dense.lora_A.weight", "F32", {1, 4},
       F32Bytes({1, 2, 3, 4})},
      {"base_model.model.transformer.h.1.self_attention.dense.lora_B.weight", "BF16", {4, 1},
       BF16Bytes({1, 0, -1, 0.5})}};
  const std::string dir_ = FreshTestDir("lora");
};

TEST_F(HandMadeAdapter, AddsScaledBTimesAToAnySlice) {
  Write(kConfig, dense_);
  auto lora = LoraAdapter::Load(dir_, Hidden4());
  ASSERT_TRUE(lora.ok()) << lora.status();
  // scale 2: delta[i][j] = 2 * B[i] * A[j]. Rows 1-3, columns 2-4 of a block of ones.
  std::vector<float> block(2 * 2, 1.0f);
  ASSERT_TRUE((*lora)->AddDelta("h.1.self_attention.dense.weight", 1, 3, 2, 4, block.data()).ok());
  EXPECT_EQ(block, (std::vector<float>{1, 1, 1 - 6, 1 - 8}));
  std::vector<float> whole(16, 0.0f);
  ASSERT_TRUE((*lora)->AddDelta("h.1.self_attention.dense.weight", 0, 4, 0, 4, whole.data()).ok());
  EXPECT_EQ(whole[3 * 4 + 3], 2 * 0.5f * 4);
  EXPECT_FALSE((*lora)->AddDelta("h.1.self_attention.dense.weight", 0, 5, 0, 4, whole.data()).ok());
  EXPECT_FALSE((*lora)->AddDelta("h.0.self_attention.dense.weight", 0, 4, 0, 4, whole.data()).ok());
}

TEST_F(HandMadeAdapter, SettingsAMergeCannotExpressAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"peft_type": "LORA", "r": 1, "lora_alpha": 2, "use_dora": true})", "use_dora"},
      {R"({"peft_type": "LORA", "r": 1, "lora_alpha": 2, "bias": "lora_only"})", "bias"},
      {R"({"peft_type": "LORA", "r": 1, "lora_alpha": 2, "modules_to_save": ["lm_head"]})",
       "modules_to_save"},
      {R"({"peft_type": "LORA", "r": 1, "lora_alpha": 2, "rank_pattern": {"dense": 2}})",
       "rank_pattern"},
      {R"({"peft_type": "IA3", "r": 1, "lora_alpha": 2})", "peft_type IA3"},
      {R"({"peft_type": "LORA", "r": 0, "lora_alpha": 2})", "r must be"},
      {R"({"peft_type": "LORA", "r": 1})", "lora_alpha"},
      {R"({"r": 1, "lora_alpha": 2})", "no peft_type"},
  };
  for (const auto& [config, needle] : cases) {
    Write(config, dense_);
    EXPECT_TRUE(absl::StrContains(Error(Hidden4()), needle)) << config;
  }
}

TEST_F(HandMadeAdapter, TensorsThatDoNotFitAreRefusedByName) {
  // A layer the model does not have, an embedding adapter, a DoRA vector, a lone A, a shape of
  // another model, a rank other than r.
  const std::string a = "base_model.model.transformer.h.1.self_attention.dense.lora_A.weight";
  const std::string b = "base_model.model.transformer.h.1.self_attention.dense.lora_B.weight";
  const std::vector<std::pair<std::vector<TestTensor>, std::string>> cases = {
      {{{"base_model.model.transformer.h.2.self_attention.dense.lora_A.weight", "F32", {1, 4},
         F32Bytes({1, 2, 3, 4})}},
       "layers 0 to 1"},
      {{{"base_model.model.transformer.word_embeddings.lora_embedding_A", "F32", {1, 16},
         F32Bytes(std::vector<float>(16, 1))}},
       "lora_embedding_A"},
      {{dense_[0], dense_[1],
        {"base_model.model.transformer.h.1.self_attention.dense.lora_magnitude_vector", "F32",
         {4}, F32Bytes({1, 1, 1, 1})}},
       "lora_magnitude_vector"},
      {{dense_[0]}, "lora_A without its lora_B"},
      {{{a, "F32", {1, 8}, F32Bytes(std::vector<float>(8, 1))}, dense_[1]}, "expected [1, 4]"},
      {{{a, "F32", {2, 4}, F32Bytes(std::vector<float>(8, 1))}, dense_[1]}, "r 1"},
      {{{"h.1.self_attention.dense.lora_A.weight", "F32", {1, 4}, F32Bytes({1, 2, 3, 4})}},
       "base_model.model."},
      {{{a, "F32", {1, 4}, F32Bytes({1, 2, NAN, 4})}, dense_[1]}, "NaN"},
  };
  for (const auto& [tensors, needle] : cases) {
    Write(kConfig, tensors);
    const std::string error = Error(Hidden4());
    EXPECT_TRUE(absl::StrContains(error, needle)) << needle << " / " << error;
  }
}

TEST_F(HandMadeAdapter, APickleIsNotRead) {
  ASSERT_TRUE(WriteTestFile(dir_ + "/adapter_config.json", kConfig).ok());
  ASSERT_TRUE(WriteTestFile(dir_ + "/adapter_model.bin", "not read").ok());
  EXPECT_TRUE(absl::StrContains(Error(Hidden4()), "safe_serialization=True"));
}

}  // namespace
}  // namespace blossom
