#include "engine/loader/checkpoint.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/loader/progress_bar.h"
#include "engine/loader/safetensors_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace blossom {
namespace {

using test_util::BF16Bytes;
using test_util::BuildSafetensors;
using test_util::F16Bytes;
using test_util::F32Bytes;
using test_util::TestTensor;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A tiny BLOOM-shaped model: vocab 8, hidden 4, 1 layer, 2 heads (only some tensors: the
// checkpoint layer does not know which tensors a model needs).
constexpr int64_t kVocab = 8, kHidden = 4;

std::vector<TestTensor> TinyTensors(const std::string& prefix) {
  std::vector<float> embeddings;
  for (int i = 0; i < kVocab * kHidden; ++i) embeddings.push_back(0.25f * i);
  return {
      {prefix + "word_embeddings.weight", "F16", {kVocab, kHidden}, F16Bytes(embeddings)},
      {prefix + "word_embeddings_layernorm.weight", "F32", {kHidden}, F32Bytes({1, 2, 3, 4})},
      {prefix + "h.0.self_attention.query_key_value.bias",
       "BF16",
       {3 * kHidden},
       BF16Bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})},
      {prefix + "ln_f.weight", "F32", {kHidden}, F32Bytes({-1, -2, -3, -4})},
  };
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::FreshTestDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  void Write(const std::string& name, const std::string& contents) {
    ASSERT_TRUE(test_util::WriteTestFile(absl::StrCat(dir_, "/", name), contents).ok()) << name;
  }
  void WriteConfig() {
    Write("config.json", test_util::TinyBloomConfigJson(kVocab, kHidden, 1, 2));
  }

  std::string OpenError() {
    absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir_);
    if (checkpoint.ok()) {
      ADD_FAILURE() << "Open unexpectedly succeeded";
      return "";
    }
    return std::string(checkpoint.status().message());
  }

  // Two shards: embeddings in the first, the rest in the second.
  void WriteShardedModel(const std::string& prefix, const std::string& index_json_override = "") {
    WriteConfig();
    std::vector<TestTensor> all = TinyTensors(prefix);
    Write("model-00001-of-00002.safetensors", BuildSafetensors({all[0], all[1]}));
    Write("model-00002-of-00002.safetensors", BuildSafetensors({all[2], all[3]}));
    uint64_t total = 0;
    for (const TestTensor& t : all) total += t.bytes.size();
    std::string index = index_json_override;
    if (index.empty()) {
      index = absl::StrCat(R"({"metadata": {"total_size": )", total, R"(}, "weight_map": {)");
      for (size_t i = 0; i < all.size(); ++i) {
        absl::StrAppend(&index, i ? ", " : "", "\"", all[i].name, "\": \"model-0000", i < 2 ? 1 : 2,
                        "-of-00002.safetensors\"");
      }
      index += "}}";
    }
    Write("model.safetensors.index.json", index);
  }

  std::string dir_;
};

// ---------------------------------------------------------------------------------------------
// Single file

TEST_F(CheckpointTest, SingleFileWithoutPrefix) {
  WriteConfig();
  Write("model.safetensors", BuildSafetensors(TinyTensors("")));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& ckpt = **checkpoint;
  EXPECT_FALSE(ckpt.sharded());
  EXPECT_EQ(ckpt.config().hidden_size, kHidden);
  EXPECT_THAT(ckpt.CanonicalNames(),
              ElementsAre("h.0.self_attention.query_key_value.bias", "ln_f.weight",
                          "word_embeddings.weight", "word_embeddings_layernorm.weight"));
  EXPECT_EQ(ckpt.total_bytes(), 64u + 16u + 24u + 16u);
  EXPECT_TRUE(ckpt.Has("ln_f.weight"));
  EXPECT_FALSE(ckpt.Has("lm_head.weight"));           // tied to the embeddings: normally absent
  EXPECT_FALSE(ckpt.Has("transformer.ln_f.weight"));  // canonical names have no prefix
  EXPECT_TRUE(ckpt.warnings().empty());

  absl::StatusOr<Tensor> emb = ckpt.Get("word_embeddings.weight", {kVocab, kHidden});
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(emb->dtype, DType::kF16);
  for (int i = 0; i < kVocab * kHidden; ++i) {
    EXPECT_EQ(HalfToFloat(emb->as<uint16_t>()[i]), 0.25f * i) << i;
  }
  absl::StatusOr<Tensor> qkv_bias = ckpt.Get("h.0.self_attention.query_key_value.bias", {12});
  ASSERT_TRUE(qkv_bias.ok()) << qkv_bias.status();
  EXPECT_EQ(qkv_bias->dtype, DType::kBF16);
  EXPECT_EQ(BF16ToFloat(qkv_bias->as<uint16_t>()[11]), 11.0f);
  absl::StatusOr<Tensor> ln_f = ckpt.Get("ln_f.weight", {kHidden});
  ASSERT_TRUE(ln_f.ok());
  EXPECT_EQ(ln_f->as<float>()[3], -4.0f);
  EXPECT_EQ(ckpt.DescribeLocation("ln_f.weight"), absl::StrCat(dir_, "/model.safetensors"));
}

TEST_F(CheckpointTest, SingleFileWithPrefix) {
  WriteConfig();
  Write("model.safetensors", BuildSafetensors(TinyTensors("transformer.")));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE((*checkpoint)->Has("word_embeddings.weight"));
  absl::StatusOr<Tensor> ln = (*checkpoint)->Get("word_embeddings_layernorm.weight", {kHidden});
  ASSERT_TRUE(ln.ok()) << ln.status();
  EXPECT_EQ(ln->as<float>()[1], 2.0f);
  EXPECT_THAT((*checkpoint)->DescribeLocation("ln_f.weight"),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("'transformer.ln_f.weight'")));
  EXPECT_THAT((*checkpoint)->DescribeLocation("nope"), HasSubstr("no tensor 'nope'"));
}

TEST_F(CheckpointTest, TensorsAreViewsIntoTheMapping) {
  WriteConfig();
  Write("model.safetensors", BuildSafetensors(TinyTensors("")));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok());
  const MappedFile& mapping = (*checkpoint)->files()[0]->mapping();
  for (const std::string& name : (*checkpoint)->CanonicalNames()) {
    const TensorEntry* entry = (*checkpoint)->FindEntry(name);
    ASSERT_NE(entry, nullptr);
    absl::StatusOr<Tensor> t = (*checkpoint)->Get(name, entry->shape);
    ASSERT_TRUE(t.ok()) << t.status();
    const uint8_t* p = static_cast<const uint8_t*>(t->data);
    EXPECT_GE(p, mapping.data());
    EXPECT_LE(p + t->bytes(), mapping.data() + mapping.size());
  }
}

TEST_F(CheckpointTest, BothSpellingsInOneFile) {
  WriteConfig();
  Write("model.safetensors",
        BuildSafetensors({{"ln_f.weight", "F32", {1}, F32Bytes({1})},
                          {"transformer.ln_f.weight", "F32", {1}, F32Bytes({2})}}));
  EXPECT_THAT(OpenError(),
              AllOf(HasSubstr("tensor 'ln_f.weight' is stored twice"),
                    HasSubstr("'transformer.ln_f.weight'"), HasSubstr("model.safetensors")));
}

TEST_F(CheckpointTest, ShapeMismatchNamesTensorFileAndShapes) {
  WriteConfig();
  Write("model.safetensors", BuildSafetensors(TinyTensors("transformer.")));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok());
  absl::StatusOr<Tensor> t = (*checkpoint)->Get("word_embeddings.weight", {kHidden, kVocab});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("tensor 'word_embeddings.weight'"),
                    HasSubstr("stored as 'transformer.word_embeddings.weight'"),
                    HasSubstr("has shape [8, 4], expected [4, 8]")));
  t = (*checkpoint)->Get("ln_f.weight", {kHidden, 1});  // rank differs
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("has shape [4], expected [4, 1]"));
}

TEST_F(CheckpointTest, MissingTensorNamesBothSpellings) {
  WriteConfig();
  Write("model.safetensors", BuildSafetensors(TinyTensors("")));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok());
  absl::StatusOr<Tensor> t = (*checkpoint)->Get("lm_head.weight", {kVocab, kHidden});
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsNotFound(t.status()));
  EXPECT_THAT(std::string(t.status().message()),
              AllOf(HasSubstr(dir_), HasSubstr("'lm_head.weight'"),
                    HasSubstr("'transformer.lm_head.weight'")));
}

TEST_F(CheckpointTest, CorruptWeightsFileIsNamed) {
  WriteConfig();
  std::string bytes = BuildSafetensors(TinyTensors(""));
  bytes.resize(bytes.size() - 1);
  Write("model.safetensors", bytes);
  EXPECT_THAT(OpenError(), AllOf(HasSubstr("model.safetensors"), HasSubstr("tensor 'ln_f.weight'"),
                                 HasSubstr("truncated")));
}

TEST_F(CheckpointTest, EmptyCheckpoint) {
  WriteConfig();
  Write("model.safetensors", test_util::BuildRawSafetensors("{}", ""));
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(dir_), HasSubstr("no tensors")));
}

// ---------------------------------------------------------------------------------------------
// Directory-level errors

TEST_F(CheckpointTest, NoDirectory) {
  auto checkpoint = Checkpoint::Open(dir_ + "/missing");
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_TRUE(absl::IsNotFound(checkpoint.status()));
  EXPECT_THAT(std::string(checkpoint.status().message()),
              AllOf(HasSubstr(dir_ + "/missing"), HasSubstr("does not exist")));
}

TEST_F(CheckpointTest, PathIsAFile) {
  Write("file", "x");
  auto checkpoint = Checkpoint::Open(dir_ + "/file");
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(std::string(checkpoint.status().message()), HasSubstr("is not a directory"));
}

TEST_F(CheckpointTest, NoConfig) {
  Write("model.safetensors", BuildSafetensors(TinyTensors("")));
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(dir_), HasSubstr("config.json")));
}

TEST_F(CheckpointTest, BadConfig) {
  Write("config.json", R"({"vocab_size": 8, "hidden_size": 6, "n_layer": 1, "n_head": 4})");
  Write("model.safetensors", BuildSafetensors(TinyTensors("")));
  EXPECT_THAT(OpenError(), AllOf(HasSubstr("config.json"), HasSubstr("not divisible")));
}

TEST_F(CheckpointTest, NoWeights) {
  WriteConfig();
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_TRUE(absl::IsNotFound(checkpoint.status()));
  EXPECT_THAT(std::string(checkpoint.status().message()),
              AllOf(HasSubstr(dir_), HasSubstr("model.safetensors"),
                    HasSubstr("model.safetensors.index.json"), Not(HasSubstr("PyTorch"))));
  Write("pytorch_model.bin", "pickle");
  EXPECT_THAT(OpenError(), HasSubstr("PyTorch .bin weights"));
}

// ---------------------------------------------------------------------------------------------
// Sharded

TEST_F(CheckpointTest, ShardedWithoutPrefix) {
  WriteShardedModel("");
  // A stray shard that the index does not list must not even be opened.
  Write("model-00003-of-00002.safetensors", "garbage");
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& ckpt = **checkpoint;
  EXPECT_TRUE(ckpt.sharded());
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_TRUE(ckpt.warnings().empty()) << ckpt.warnings()[0];
  EXPECT_EQ(ckpt.CanonicalNames().size(), 4u);
  EXPECT_EQ(ckpt.total_bytes(), 120u);
  EXPECT_THAT(ckpt.DescribeLocation("word_embeddings.weight"),
              HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT(ckpt.DescribeLocation("ln_f.weight"), HasSubstr("model-00002-of-00002.safetensors"));
  absl::StatusOr<Tensor> ln_f = ckpt.Get("ln_f.weight", {kHidden});
  ASSERT_TRUE(ln_f.ok()) << ln_f.status();
  EXPECT_EQ(ln_f->as<float>()[0], -1.0f);
  absl::StatusOr<Tensor> emb = ckpt.Get("word_embeddings.weight", {kVocab, kHidden});
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(HalfToFloat(emb->as<uint16_t>()[5]), 1.25f);
}

TEST_F(CheckpointTest, ShardedWithPrefix) {
  WriteShardedModel("transformer.");
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE((*checkpoint)->Has("h.0.self_attention.query_key_value.bias"));
  absl::StatusOr<Tensor> bias =
      (*checkpoint)->Get("h.0.self_attention.query_key_value.bias", {3 * kHidden});
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(BF16ToFloat(bias->as<uint16_t>()[4]), 4.0f);
  EXPECT_THAT((*checkpoint)->DescribeLocation("h.0.self_attention.query_key_value.bias"),
              AllOf(HasSubstr("model-00002-of-00002.safetensors"),
                    HasSubstr("'transformer.h.0.self_attention.query_key_value.bias'")));
}

TEST_F(CheckpointTest, SingleFileWinsOverIndexWithWarning) {
  WriteShardedModel("");
  Write("model.safetensors", BuildSafetensors({{"ln_f.weight", "F32", {1}, F32Bytes({5})}}));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_FALSE((*checkpoint)->sharded());
  EXPECT_THAT((*checkpoint)->warnings(), Contains(HasSubstr("both model.safetensors and")));
}

TEST_F(CheckpointTest, ShardNameMustBePlainFileName) {
  for (const char* shard :
       {"../model.safetensors", "/etc/passwd", "sub/x.safetensors", "..", "", "."}) {
    WriteShardedModel("", absl::StrCat(R"({"weight_map": {"ln_f.weight": ")", shard, "\"}}"));
    EXPECT_THAT(OpenError(),
                AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("tensor 'ln_f.weight'"),
                      HasSubstr("not a plain file name")))
        << shard;
  }
}

TEST_F(CheckpointTest, ListedShardMissing) {
  WriteShardedModel("", R"({"weight_map": {"ln_f.weight": "model-00002-of-00002.safetensors",
                                            "extra.weight": "model-00009-of-00009.safetensors"}})");
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_TRUE(absl::IsNotFound(checkpoint.status()));
  EXPECT_THAT(std::string(checkpoint.status().message()),
              AllOf(HasSubstr("model.safetensors.index.json"),
                    HasSubstr("shard 'model-00009-of-00009.safetensors'"),
                    HasSubstr("tensor 'extra.weight'"), HasSubstr("does not exist")));
}

TEST_F(CheckpointTest, WeightMapNameNotInItsShard) {
  WriteShardedModel("", R"({"weight_map": {"ln_f.weight": "model-00001-of-00002.safetensors"}})");
  EXPECT_THAT(
      OpenError(),
      AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("tensor 'ln_f.weight'"),
            HasSubstr("'model-00001-of-00002.safetensors'"), HasSubstr("has no such tensor")));
}

TEST_F(CheckpointTest, UnlistedShardTensorsAreLoadedWithAWarning) {
  // As Hugging Face: every tensor of a listed shard loads; the index only chooses the shards.
  WriteShardedModel("", R"({"weight_map": {"ln_f.weight": "model-00002-of-00002.safetensors"}})");
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->files().size(), 1u);  // only the listed shard is opened
  EXPECT_THAT((*checkpoint)->CanonicalNames(),
              ElementsAre("h.0.self_attention.query_key_value.bias", "ln_f.weight"));
  EXPECT_THAT((*checkpoint)->warnings(),
              ElementsAre(AllOf(HasSubstr("model-00002-of-00002.safetensors"),
                                HasSubstr("1 tensor(s) not listed"),
                                HasSubstr("'h.0.self_attention.query_key_value.bias'"),
                                HasSubstr("loaded too"))));
  absl::StatusOr<Tensor> bias =
      (*checkpoint)->Get("h.0.self_attention.query_key_value.bias", {3 * kHidden});
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(BF16ToFloat(bias->as<uint16_t>()[11]), 11.0f);
  EXPECT_EQ((*checkpoint)->total_bytes(), 24u + 16u);
}

TEST_F(CheckpointTest, UnlistedTensorAlsoInAnotherShardIsStoredTwice) {
  WriteConfig();
  Write("a.safetensors", BuildSafetensors({{"ln_f.weight", "F32", {1}, F32Bytes({1})}}));
  Write("b.safetensors", BuildSafetensors({{"ln_f.bias", "F32", {1}, F32Bytes({0})},
                                           {"transformer.ln_f.weight", "F32", {1}, F32Bytes({2})}}));
  Write("model.safetensors.index.json",
        R"({"weight_map": {"ln_f.weight": "a.safetensors", "ln_f.bias": "b.safetensors"}})");
  EXPECT_THAT(OpenError(), AllOf(HasSubstr("tensor 'ln_f.weight' is stored twice"),
                                 HasSubstr("a.safetensors"), HasSubstr("b.safetensors")));
}

TEST_F(CheckpointTest, MisalignedShardsOpenWithOneWarningEach) {
  // Writers before safetensors 0.3.0 did not pad the header: data starts at 8 + header length.
  test_util::SafetensorsWriteOptions unpadded;
  unpadded.align = 1;
  unpadded.edit_header = [](std::string* header) {
    while ((8 + header->size()) % 2 == 0) header->push_back(' ');
  };
  WriteConfig();
  std::vector<TestTensor> all = TinyTensors("");
  Write("model-00001-of-00002.safetensors", BuildSafetensors({all[0], all[1]}, unpadded));
  Write("model-00002-of-00002.safetensors", BuildSafetensors({all[2], all[3]}, unpadded));
  Write("model.safetensors.index.json",
        absl::StrCat(R"({"weight_map": {")", all[0].name, R"(": "model-00001-of-00002.safetensors", ")",
                     all[1].name, R"(": "model-00001-of-00002.safetensors", ")", all[2].name,
                     R"(": "model-00002-of-00002.safetensors", ")", all[3].name,
                     R"(": "model-00002-of-00002.safetensors"}})"));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT((*checkpoint)->warnings(),
              ElementsAre(AllOf(HasSubstr("model-00001-of-00002.safetensors"),
                                HasSubstr("2 of its 2 tensors are not aligned"),
                                HasSubstr("0.3.0"), HasSubstr("copies")),
                          AllOf(HasSubstr("model-00002-of-00002.safetensors"),
                                HasSubstr("2 of its 2 tensors are not aligned"))));
  // Refused where the caller would read numbers through the view; handed out to one that copies.
  absl::StatusOr<Tensor> refused = (*checkpoint)->Get("ln_f.weight", {kHidden});
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  absl::StatusOr<Tensor> ln_f =
      (*checkpoint)->Get("ln_f.weight", {kHidden}, Misaligned::kAllow);
  ASSERT_TRUE(ln_f.ok()) << ln_f.status();
  EXPECT_FALSE(IsAlignedView(*ln_f));
  EXPECT_EQ(std::string(static_cast<const char*>(ln_f->data), ln_f->bytes()), all[3].bytes);
}

TEST_F(CheckpointTest, TotalSizeMismatchIsOnlyAWarning) {
  WriteShardedModel("", R"({"metadata": {"total_size": 999},
                            "weight_map": {"ln_f.weight": "model-00002-of-00002.safetensors",
                                           "h.0.self_attention.query_key_value.bias":
                                               "model-00002-of-00002.safetensors"}})");
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT((*checkpoint)->warnings(),
              ElementsAre(AllOf(HasSubstr("total_size is 999"), HasSubstr("take 40 bytes"))));

  WriteShardedModel("", R"({"metadata": {"total_size": "big"},
                            "weight_map": {"ln_f.weight": "model-00002-of-00002.safetensors",
                                           "h.0.self_attention.query_key_value.bias":
                                               "model-00002-of-00002.safetensors"}})");
  checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT((*checkpoint)->warnings(), ElementsAre(HasSubstr("total_size is not")));
}

TEST_F(CheckpointTest, BothSpellingsAcrossShards) {
  WriteConfig();
  Write("a.safetensors", BuildSafetensors({{"ln_f.weight", "F32", {1}, F32Bytes({1})}}));
  Write("b.safetensors",
        BuildSafetensors({{"transformer.ln_f.weight", "F32", {1}, F32Bytes({2})}}));
  Write("model.safetensors.index.json",
        R"({"weight_map": {"ln_f.weight": "a.safetensors",
                           "transformer.ln_f.weight": "b.safetensors"}})");
  EXPECT_THAT(OpenError(), AllOf(HasSubstr("tensor 'ln_f.weight' is stored twice"),
                                 HasSubstr("a.safetensors"), HasSubstr("b.safetensors")));
}

TEST_F(CheckpointTest, MalformedIndex) {
  struct Case {
    const char* index;
    const char* expected;
  };
  for (const Case& c : {
           Case{"{\"weight_map\": ", "invalid JSON"},
           Case{"[]", "expected a JSON object"},
           Case{"{}", "missing field 'weight_map'"},
           Case{R"({"weight_map": []})", "'weight_map' must be an object"},
           Case{R"({"weight_map": {}})", "'weight_map' is empty"},
           Case{R"({"weight_map": {"ln_f.weight": 3}})",
                "entry for tensor 'ln_f.weight' must be a file name string, got number 3"},
           Case{R"({"weight_map": {"ln_f.weight": "model-00002-of-00002.safetensors",
                                   "ln_f.weight": "model-00002-of-00002.safetensors"}})",
                "duplicate key 'ln_f.weight'"},
       }) {
    WriteShardedModel("", c.index);
    EXPECT_THAT(OpenError(),
                AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr(c.expected)))
        << c.index;
  }
}

TEST_F(CheckpointTest, CorruptShardIsNamed) {
  WriteShardedModel("");
  Write("model-00002-of-00002.safetensors", "short");
  EXPECT_THAT(OpenError(), AllOf(HasSubstr("model-00002-of-00002.safetensors"),
                                 HasSubstr("shorter than the 8-byte")));
}

// ---------------------------------------------------------------------------------------------
// Prefetch

TEST_F(CheckpointTest, PrefetchReportsMonotonicProgressToTheTotal) {
  WriteShardedModel("");
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok());
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  absl::Status status =
      (*checkpoint)
          ->Prefetch([&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); },
                     /*chunk_bytes=*/16);
  ASSERT_TRUE(status.ok()) << status;
  // 80 data bytes in shard 1 (5 chunks) + 40 in shard 2 (3 chunks), plus the initial 0.
  ASSERT_EQ(calls.size(), 1u + 5u + 3u);
  EXPECT_EQ(calls.front().first, 0u);
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GT(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls[i].second, 120u);
  }
  EXPECT_EQ(calls.back().first, 120u);
  EXPECT_TRUE((*checkpoint)->Prefetch().ok());  // no callback, default chunks
  EXPECT_FALSE((*checkpoint)->Prefetch(nullptr, 0).ok());
}

// Resident kB of this process's mapping of `path` (/proc/self/smaps), -1 if not found. A mapping's
// header line starts with its address range ("7f...-7f... r--p ... /path"); its fields follow.
int64_t MappedResidentKb(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    const std::string first = line.substr(0, line.find(' '));
    if (first.find('-') != std::string::npos) {
      in_mapping = absl::EndsWith(line, path);
    } else if (in_mapping && absl::StartsWith(line, "Rss:")) {
      return std::stoll(line.substr(4));
    }
  }
  return -1;
}

TEST_F(CheckpointTest, ReleasePagesGivesBackTheMappedPagesOfAViewAndKeepsItsData) {
  WriteConfig();
  std::vector<float> big(256 * 1024);  // 1 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000);
  std::vector<TestTensor> tensors = TinyTensors("");
  tensors.push_back({"h.0.mlp.dense_h_to_4h.weight", "F32", {256, 1024}, F32Bytes(big)});
  Write("model.safetensors", BuildSafetensors(tensors));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE((*checkpoint)->Prefetch().ok());
  const std::string path = absl::StrCat(dir_, "/model.safetensors");
  const int64_t before = MappedResidentKb(path);
  ASSERT_GE(before, 1024) << "the prefetched mapping should be resident";
  absl::StatusOr<Tensor> view = (*checkpoint)->Get("h.0.mlp.dense_h_to_4h.weight", {256, 1024});
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE((*checkpoint)->ReleasePages(*view).ok());
  const int64_t after = MappedResidentKb(path);
  EXPECT_LE(after, before - 1000) << "before " << before << " kB, after " << after << " kB";
  // Read back from the file on the next touch.
  const float* data = view->as<const float>();
  for (size_t i = 0; i < big.size(); i += 997) ASSERT_EQ(data[i], big[i]) << i;
  // Rows of a view (what a tensor-parallel rank imports) and a range outside every mapping.
  EXPECT_TRUE((*checkpoint)->ReleasePages(view->Rows(10, 20)).ok());
  std::vector<float> elsewhere(16);
  absl::Status outside =
      (*checkpoint)->ReleasePages(Tensor(elsewhere.data(), DType::kF32, {16}));
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, PrefetchDrivesAProgressBar) {
  WriteConfig();
  Write("model.safetensors", BuildSafetensors(TinyTensors("")));
  auto checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok());
  std::ostringstream out;
  absl::Time now = absl::UnixEpoch();
  ProgressBar::Options options;
  options.min_total_bytes = 0;
  {
    ProgressBar bar((*checkpoint)->total_bytes(), options, &out, /*out_is_tty=*/true,
                    [&now] { return now += absl::Milliseconds(50); });
    ASSERT_TRUE((*checkpoint)->Prefetch(bar.Callback(), 8).ok());
  }
  EXPECT_THAT(out.str(), HasSubstr("100.0%"));
  EXPECT_THAT(out.str(), HasSubstr("120 / 120 B"));
  EXPECT_EQ(out.str().back(), '\n');
}

}  // namespace
}  // namespace blossom
