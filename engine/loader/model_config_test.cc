#include "engine/loader/model_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/loader/file_util.h"
#include "engine/loader/safetensors_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// bloom-560m's config.json as published (hidden_size/n_head/n_layer spelling).
constexpr char kBloom560m[] = R"({
  "apply_residual_connection_post_layernorm": false,
  "architectures": ["BloomForCausalLM"],
  "attention_dropout": 0.0,
  "attention_softmax_in_fp32": true,
  "bias_dropout_fusion": true,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_dropout": 0.0,
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "masked_softmax_fusion": true,
  "model_type": "bloom",
  "n_head": 16,
  "n_inner": null,
  "n_layer": 24,
  "offset_alibi": 100,
  "pad_token_id": 3,
  "pretraining_tp": 1,
  "skip_bias_add": true,
  "skip_bias_add_qkv": false,
  "slow_but_exact": false,
  "torch_dtype": "float16",
  "transformers_version": "4.21.0.dev0",
  "unk_token_id": 0,
  "use_cache": true,
  "vocab_size": 250880
})";

std::string ErrorOf(absl::string_view text) {
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(text, "dir/config.json");
  if (config.ok()) return "OK";
  return std::string(config.status().message());
}

TEST(ModelConfigTest, ParsesBloom560m) {
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(kBloom560m, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vocab_size, 250880);
  EXPECT_EQ(config->hidden_size, 1024);
  EXPECT_EQ(config->n_layer, 24);
  EXPECT_EQ(config->n_head, 16);
  EXPECT_EQ(config->head_dim(), 64);
  EXPECT_EQ(config->ffn_hidden_size(), 4096);
  EXPECT_DOUBLE_EQ(config->layer_norm_epsilon, 1e-5);
  EXPECT_FALSE(config->apply_residual_connection_post_layernorm);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_id, 2);
  EXPECT_EQ(config->pad_token_id, 3);
  EXPECT_EQ(config->torch_dtype, "float16");
  EXPECT_TRUE(config->tie_word_embeddings);  // absent: HF's default, tied
}

TEST(ModelConfigTest, ParsesTieWordEmbeddings) {
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(
      R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
          "tie_word_embeddings": false})",
      "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "tie_word_embeddings": "false"})"),
              AllOf(HasSubstr("'tie_word_embeddings'"), HasSubstr("must be a boolean")));
}

TEST(ModelConfigTest, ParsesAlternativeSpellingsAndDefaults) {
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(
      R"({"vocab_size": 100, "n_embed": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
          "apply_residual_connection_post_layernorm": true, "layer_norm_epsilon": 1e-6})",
      "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 96);
  EXPECT_EQ(config->n_layer, 3);
  EXPECT_EQ(config->n_head, 4);
  EXPECT_EQ(config->head_dim(), 24);
  EXPECT_TRUE(config->apply_residual_connection_post_layernorm);
  EXPECT_DOUBLE_EQ(config->layer_norm_epsilon, 1e-6);
  EXPECT_EQ(config->bos_token_id, 1);  // defaults
  EXPECT_EQ(config->pad_token_id, 3);
  EXPECT_EQ(config->torch_dtype, "");
}

TEST(ModelConfigTest, BothSpellingsAgreeingIsFine) {
  EXPECT_EQ(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_embed": 8, "n_layer": 1,
                        "num_hidden_layers": 1, "n_head": 2, "num_attention_heads": 2})"),
            "OK");
}

TEST(ModelConfigTest, DisagreeingSpellings) {
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_embed": 16, "n_layer": 1,
                          "n_head": 2})"),
              AllOf(HasSubstr("dir/config.json"), HasSubstr("'hidden_size'"),
                    HasSubstr("'n_embed'"), HasSubstr("disagree")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1,
                          "num_hidden_layers": 2, "n_head": 2})"),
              AllOf(HasSubstr("'n_layer'"), HasSubstr("'num_hidden_layers'")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "num_attention_heads": 4})"),
              AllOf(HasSubstr("'n_head'"), HasSubstr("'num_attention_heads'")));
}

TEST(ModelConfigTest, MissingRequiredFields) {
  EXPECT_THAT(ErrorOf(R"({"hidden_size": 8, "n_layer": 1, "n_head": 2})"),
              AllOf(HasSubstr("dir/config.json"), HasSubstr("'vocab_size'"), HasSubstr("missing")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "n_layer": 1, "n_head": 2})"),
              AllOf(HasSubstr("'hidden_size' (or 'n_embed')"), HasSubstr("missing")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_head": 2})"),
              AllOf(HasSubstr("'n_layer' (or 'num_hidden_layers')"), HasSubstr("missing")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1})"),
              AllOf(HasSubstr("'n_head' (or 'num_attention_heads')"), HasSubstr("missing")));
}

TEST(ModelConfigTest, WrongTypes) {
  EXPECT_THAT(ErrorOf(R"({"vocab_size": "250880", "hidden_size": 8, "n_layer": 1, "n_head": 2})"),
              AllOf(HasSubstr("'vocab_size'"), HasSubstr("must be an integer"),
                    HasSubstr("string \"250880\"")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8.5, "n_layer": 1, "n_head": 2})"),
              AllOf(HasSubstr("'hidden_size'"), HasSubstr("must be an integer")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": true, "n_head": 2})"),
              AllOf(HasSubstr("'n_layer'"), HasSubstr("boolean true")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "layer_norm_epsilon": "1e-5"})"),
              AllOf(HasSubstr("'layer_norm_epsilon'"), HasSubstr("must be a number")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "apply_residual_connection_post_layernorm": 0})"),
              AllOf(HasSubstr("'apply_residual_connection_post_layernorm'"),
                    HasSubstr("must be a boolean")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "eos_token_id": "2"})"),
              AllOf(HasSubstr("'eos_token_id'"), HasSubstr("must be an integer")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "torch_dtype": 16})"),
              AllOf(HasSubstr("'torch_dtype'"), HasSubstr("must be a string")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "slow_but_exact": "no"})"),
              AllOf(HasSubstr("'slow_but_exact'"), HasSubstr("must be a boolean")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "model_type": 7})"),
              AllOf(HasSubstr("'model_type'"), HasSubstr("must be a string")));
}

TEST(ModelConfigTest, NonPositiveAndOutOfRangeValues) {
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 0, "hidden_size": 8, "n_layer": 1, "n_head": 2})"),
              AllOf(HasSubstr("'vocab_size'"), HasSubstr("must be positive")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": -1, "n_head": 2})"),
              AllOf(HasSubstr("'n_layer'"), HasSubstr("must be positive, got -1")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1,
                          "n_head": 99999999999999999999})"),
              AllOf(HasSubstr("'n_head'"), HasSubstr("must be an integer")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "layer_norm_epsilon": 0})"),
              HasSubstr("'layer_norm_epsilon' must be positive"));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "pad_token_id": 10})"),
              AllOf(HasSubstr("'pad_token_id'"), HasSubstr("outside the vocabulary")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 4611686018427387904, "n_layer": 1,
                          "n_head": 2})"),
              HasSubstr("too large"));
}

TEST(ModelConfigTest, NullOptionalFieldsUseDefaults) {
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(
      R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2, "pad_token_id": null,
          "torch_dtype": null, "layer_norm_epsilon": null})",
      "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pad_token_id, 3);
  EXPECT_EQ(config->torch_dtype, "");
}

TEST(ModelConfigTest, HiddenNotDivisibleByHeads) {
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 10, "n_layer": 1, "n_head": 4})"),
              AllOf(HasSubstr("dir/config.json"), HasSubstr("hidden_size 10"),
                    HasSubstr("not divisible by n_head 4")));
}

TEST(ModelConfigTest, SlowButExactRefusedOnlyWithPretrainingTpAboveOne) {
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(
      R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
          "slow_but_exact": true, "pretraining_tp": 4})",
      "dir/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::IsUnimplemented(config.status()));
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("dir/config.json"), HasSubstr("'slow_but_exact' is true"),
                    HasSubstr("'pretraining_tp' 4"), HasSubstr("set it to false")));
  // Hugging Face takes its sliced path only when both hold: otherwise the plain one, Blossom's.
  EXPECT_EQ(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                        "slow_but_exact": true, "pretraining_tp": 1})"),
            "OK");
  EXPECT_EQ(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                        "slow_but_exact": true})"),
            "OK");
  EXPECT_EQ(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                        "slow_but_exact": false, "pretraining_tp": 4})"),
            "OK");
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "slow_but_exact": true, "pretraining_tp": "4"})"),
              AllOf(HasSubstr("'pretraining_tp'"), HasSubstr("must be a positive integer")));
}

TEST(ModelConfigTest, QuantizedCheckpointIsRefusedNamingItsMethod) {
  for (const char* method : {"gptq", "awq", "bitsandbytes"}) {
    absl::StatusOr<BloomConfig> config = ParseBloomConfig(
        absl::StrCat(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                         "quantization_config": {"bits": 4, "quant_method": ")",
                     method, R"("}})"),
        "dir/config.json");
    ASSERT_FALSE(config.ok()) << method;
    EXPECT_TRUE(absl::IsUnimplemented(config.status())) << config.status();
    EXPECT_THAT(std::string(config.status().message()),
                AllOf(HasSubstr("dir/config.json"), HasSubstr("'quantization_config'"),
                      HasSubstr(absl::StrCat("'", method, "'")), HasSubstr("unquantized"),
                      HasSubstr("--quantize int8, int4 or bf16")));
  }
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "quantization_config": {"load_in_8bit": true}})"),
              AllOf(HasSubstr("'quantization_config'"), HasSubstr("no 'quant_method'")));
  EXPECT_EQ(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                        "quantization_config": null})"),
            "OK");
}

TEST(ModelConfigTest, EosTokenIdMayBeAList) {
  absl::StatusOr<BloomConfig> config = ParseBloomConfig(
      R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
          "eos_token_id": [7, 2, 9]})",
      "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_id, 7);  // the engine's stop token: the first
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{7, 2, 9}));
  config = ParseBloomConfig(kBloom560m, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "eos_token_id": []})"),
              AllOf(HasSubstr("'eos_token_id'"), HasSubstr("non-empty list")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "eos_token_id": [2, "3"]})"),
              AllOf(HasSubstr("'eos_token_id'[1]"), HasSubstr("must be an integer")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "hidden_size": 8, "n_layer": 1, "n_head": 2,
                          "eos_token_id": [2, 10]})"),
              AllOf(HasSubstr("'eos_token_id'[1] = 10"), HasSubstr("outside the vocabulary")));
}

TEST(ModelConfigTest, WrongModelType) {
  EXPECT_THAT(ErrorOf(R"({"model_type": "gpt2", "vocab_size": 10, "hidden_size": 8,
                          "n_layer": 1, "n_head": 2})"),
              AllOf(HasSubstr("'model_type'"), HasSubstr("\"gpt2\""), HasSubstr("\"bloom\"")));
}

TEST(ModelConfigTest, MalformedJson) {
  std::string error = ErrorOf("{\"vocab_size\": 10,\n \"hidden_size\": }");
  EXPECT_THAT(error,
              AllOf(HasSubstr("dir/config.json"), HasSubstr("invalid JSON"), HasSubstr("line 2")));
  EXPECT_THAT(ErrorOf(""), AllOf(HasSubstr("dir/config.json"), HasSubstr("invalid JSON")));
  EXPECT_THAT(ErrorOf("[1, 2]"), AllOf(HasSubstr("dir/config.json"), HasSubstr("object")));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10, "vocab_size": 11})"),
              AllOf(HasSubstr("dir/config.json"), HasSubstr("duplicate key 'vocab_size'")));
}

TEST(ModelConfigTest, LoadFromDirectory) {
  std::string dir = test_util::FreshTestDir("config_load");
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "config.json"), kBloom560m).ok());
  absl::StatusOr<BloomConfig> config = LoadBloomConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 1024);
}

// generation_config.json's end tokens (a chat fine-tune's end of turn) join config.json's.
TEST(ModelConfigTest, GenerationConfigEndTokensJoinTheConfigs) {
  std::string dir = test_util::FreshTestDir("config_generation");
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "config.json"), kBloom560m).ok());
  const std::string generation = JoinPath(dir, "generation_config.json");
  ASSERT_TRUE(WriteStringToFile(generation, R"({"eos_token_id": [2, 250679, 2]})").ok());
  absl::StatusOr<BloomConfig> config = LoadBloomConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_id, 2);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{2, 250679}));
  ASSERT_TRUE(WriteStringToFile(generation, R"({"do_sample": true})").ok());
  config = LoadBloomConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{2}));
  ASSERT_TRUE(WriteStringToFile(generation, R"({"eos_token_id": 999999})").ok());
  config = LoadBloomConfig(dir);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("generation_config.json"), HasSubstr("outside the vocabulary")));
  ASSERT_TRUE(WriteStringToFile(generation, "[1]").ok());
  config = LoadBloomConfig(dir);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("generation_config.json"));
}

TEST(ModelConfigTest, LoadErrorsNameThePath) {
  std::string dir = test_util::FreshTestDir("config_missing");
  absl::StatusOr<BloomConfig> config = LoadBloomConfig(dir);
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::IsNotFound(config.status()));
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr(dir), HasSubstr("config.json")));

  config = LoadBloomConfig(JoinPath(dir, "no_such_dir"));
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::IsNotFound(config.status()));
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("no_such_dir"), HasSubstr("does not exist")));

  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "config.json"), "{oops").ok());
  config = LoadBloomConfig(dir);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr(JoinPath(dir, "config.json")), HasSubstr("invalid JSON")));
}

}  // namespace
}  // namespace blossom
