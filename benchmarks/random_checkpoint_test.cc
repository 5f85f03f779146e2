#include "benchmarks/random_checkpoint.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/loader/checkpoint.h"
#include "engine/loader/file_util.h"
#include "engine/model/bloom_model.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

RandomCheckpointOptions TinyOptions() {
  RandomCheckpointOptions options;
  options.shape = BloomShape{"custom", 64, 2, 4, 2002};
  options.dtype = DType::kBF16;
  options.seed = 7;
  options.tokenizer_dir = FixturePath("tokenizer");
  options.threads = 2;
  return options;
}

// Greedy-free smoke test of the written weights: one prefill step through the real loader and
// model, returning the logits of the last prompt token.
std::vector<float> ForwardOnce(const std::string& dir) {
  CpuBackend backend(2);
  absl::StatusOr<std::unique_ptr<BloomModel>> model = BloomModel::Load(dir, &backend, nullptr);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto cache = (*model)->CreateKvCache(1, 16);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return {};
  StepBatch batch;
  batch.max_blocks_per_seq = 1;
  const std::vector<int32_t> prompt = {5, 17, 300, 1999};
  const std::vector<int32_t> table = {0};
  batch.AddSequence(prompt, 0, table, true);
  std::vector<float> logits((*model)->vocab_size());
  absl::Status s = (*model)->Forward(batch, **cache, logits.data());
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

TEST(RandomCheckpointTest, TinyCustomShapeLoadsAndRunsAForwardStep) {
  const std::string dir = TempDir("tiny_single");
  absl::StatusOr<RandomCheckpointInfo> info = WriteRandomCheckpoint(dir, TinyOptions());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->weight_files, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(info->param_count, 2 * (12 * 64 * 64 + 13 * 64) + 2002 * 64 + 4 * 64);
  EXPECT_EQ(info->total_bytes, static_cast<uint64_t>(info->param_count) * 2);
  for (const char* f :
       {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_EQ(GetPathKind(JoinPath(dir, f)), PathKind::kRegularFile) << f;
  }
  absl::StatusOr<BloomConfig> config = LoadBloomConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 64);
  EXPECT_EQ(config->n_head, 4);
  EXPECT_EQ(config->n_layer, 2);
  EXPECT_EQ(config->vocab_size, 2002);
  EXPECT_EQ(config->torch_dtype, "bfloat16");

  std::vector<float> logits = ForwardOnce(dir);
  ASSERT_EQ(logits.size(), 2002u);
  float max_abs = 0.0f;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    max_abs = std::max(max_abs, std::fabs(v));
  }
  EXPECT_GT(max_abs, 0.0f);  // random weights give non-trivial logits

  // A second write into the same directory is refused (stale weights would shadow new ones).
  EXPECT_EQ(WriteRandomCheckpoint(dir, TinyOptions()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RandomCheckpointTest, ShardedCheckpointHasAnIndexAndTheSameWeights) {
  RandomCheckpointOptions options = TinyOptions();
  const std::string single = TempDir("tiny_ref");
  ASSERT_TRUE(WriteRandomCheckpoint(single, options).ok());
  options.max_shard_bytes = 100000;  // the 256 KB embedding alone, then the layers in pieces
  const std::string sharded = TempDir("tiny_sharded");
  absl::StatusOr<RandomCheckpointInfo> info = WriteRandomCheckpoint(sharded, options);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_GT(info->weight_files.size(), 2u);
  EXPECT_EQ(info->weight_files[0],
            "model-00001-of-0000" + std::to_string(info->weight_files.size()) + ".safetensors");

  absl::StatusOr<std::string> index_text =
      ReadFileToString(JoinPath(sharded, "model.safetensors.index.json"));
  ASSERT_TRUE(index_text.ok());
  nlohmann::json index = nlohmann::json::parse(*index_text);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), info->total_bytes);
  EXPECT_EQ(index["weight_map"].size(), BloomTensorSpecs(options.shape).size());

  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(sharded);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE((*checkpoint)->sharded());
  EXPECT_TRUE((*checkpoint)->warnings().empty());
  EXPECT_EQ((*checkpoint)->total_bytes(), info->total_bytes);

  // Same seed, same values, whatever the sharding: identical logits.
  EXPECT_EQ(ForwardOnce(single), ForwardOnce(sharded));
}

TEST(RandomCheckpointTest, InitialisationFollowsHuggingFace) {
  RandomCheckpointOptions options = TinyOptions();
  options.dtype = DType::kF32;
  const std::string dir = TempDir("tiny_f32");
  ASSERT_TRUE(WriteRandomCheckpoint(dir, options).ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& c = **checkpoint;

  absl::StatusOr<Tensor> gamma = c.Get("h.1.post_attention_layernorm.weight", {64});
  absl::StatusOr<Tensor> beta = c.Get("h.1.post_attention_layernorm.bias", {64});
  absl::StatusOr<Tensor> bias = c.Get("h.0.mlp.dense_h_to_4h.bias", {256});
  ASSERT_TRUE(gamma.ok() && beta.ok() && bias.ok());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(static_cast<const float*>(gamma->data)[i], 1.0f);
    EXPECT_EQ(static_cast<const float*>(beta->data)[i], 0.0f);
  }
  for (int i = 0; i < 256; ++i) EXPECT_EQ(static_cast<const float*>(bias->data)[i], 0.0f);

  absl::StatusOr<Tensor> emb = c.Get("word_embeddings.weight", {2002, 64});
  ASSERT_TRUE(emb.ok());
  const float* e = static_cast<const float*>(emb->data);
  double sum = 0.0, sum_sq = 0.0;
  const int64_t n = 2002 * 64;
  for (int64_t i = 0; i < n; ++i) {
    sum += e[i];
    sum_sq += static_cast<double>(e[i]) * e[i];
  }
  const double mean = sum / n;
  const double std = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);  // 5 standard errors of the mean
  EXPECT_NEAR(std, 0.02, 0.0005);
}

TEST(RandomCheckpointTest, NormalStreamDoesNotDependOnChunking) {
  std::vector<float> whole(101), parts(101);
  FillNormal(42, 0, 101, 1.0f, whole.data());
  FillNormal(42, 0, 33, 1.0f, parts.data());  // ends mid-pair
  FillNormal(42, 33, 1, 1.0f, parts.data() + 33);
  FillNormal(42, 34, 67, 1.0f, parts.data() + 34);
  EXPECT_EQ(whole, parts);
  std::vector<float> other(101);
  FillNormal(43, 0, 101, 1.0f, other.data());
  EXPECT_NE(whole, other);
  EXPECT_NE(TensorKey(0, "h.0.mlp.dense_h_to_4h.weight"),
            TensorKey(0, "h.1.mlp.dense_h_to_4h.weight"));
  EXPECT_NE(TensorKey(0, "ln_f.weight"), TensorKey(1, "ln_f.weight"));
}

TEST(RandomCheckpointTest, PlanShardsLikeTransformers) {
  std::vector<TensorSpec> specs = {{"a", {10}}, {"b", {10}}, {"c", {30}}, {"d", {5}}, {"e", {1}}};
  // F32: 40, 40, 120, 20, 4 bytes; limit 100. The oversized tensor gets a shard of its own.
  std::vector<std::vector<size_t>> shards = PlanShards(specs, DType::kF32, 100);
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(shards[0], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(shards[1], (std::vector<size_t>{2}));
  EXPECT_EQ(shards[2], (std::vector<size_t>{3, 4}));
  EXPECT_EQ(PlanShards(specs, DType::kF32, 1000).size(), 1u);
}

TEST(RandomCheckpointTest, ConfigJsonHasHuggingFaceFields) {
  nlohmann::json c =
      nlohmann::json::parse(BloomConfigJson(*BloomShapeByName("176b-2layers"), DType::kBF16, 0.02));
  EXPECT_EQ(c["initializer_range"], 0.02);
  EXPECT_EQ(c["model_type"], "bloom");
  EXPECT_EQ(c["architectures"][0], "BloomForCausalLM");
  EXPECT_EQ(c["hidden_size"], 14336);
  EXPECT_EQ(c["n_head"], 112);
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["vocab_size"], 250880);
  EXPECT_EQ(c["torch_dtype"], "bfloat16");
  EXPECT_EQ(c["slow_but_exact"], false);
}

}  // namespace
}  // namespace blossom
