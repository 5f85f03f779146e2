// Loading Hugging Face BLOOM checkpoints as they are found in the wild, not only as the current
// writers make them: unpadded (misaligned) safetensors files, tied checkpoints that kept only
// lm_head.weight, and checkpoints mixing dtypes. Each is bloom-tiny-h4 rewritten; the model it
// loads is compared with the one the fixture itself loads.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/loader/checkpoint.h"
#include "engine/loader/safetensors_test_util.h"
#include "engine/model/bloom_model.h"
#include "engine/model/forward_driver.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_communicator.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

constexpr int32_t kBlockSize = 4;
const std::vector<int32_t> kPrompt = {5, 17, 300, 2000, 42, 7, 1023, 64, 9};

struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// bloom-tiny-h4's tensors (all F32) by canonical name.
std::map<std::string, FloatTensor> TinyH4() {
  std::map<std::string, FloatTensor> out;
  auto source = Checkpoint::Open(FixturePath("models/bloom-tiny-h4"));
  EXPECT_TRUE(source.ok()) << source.status();
  if (!source.ok()) return out;
  for (const std::string& name : (*source)->CanonicalNames()) {
    const TensorEntry* entry = (*source)->FindEntry(name);
    auto view = (*source)->Get(name, entry->shape);
    EXPECT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->dtype, DType::kF32);
    const float* p = view->as<const float>();
    out[name] = {entry->shape, std::vector<float>(p, p + view->numel())};
  }
  return out;
}

bool IsLinearWeight(const std::string& name) {
  return absl::EndsWith(name, "query_key_value.weight") ||
         absl::EndsWith(name, "self_attention.dense.weight") ||
         absl::EndsWith(name, "dense_h_to_4h.weight") || absl::EndsWith(name, "dense_4h_to_h.weight");
}

std::string Encode(const std::vector<float>& values, const std::string& dtype) {
  if (dtype == "F16") return test_util::F16Bytes(values);
  if (dtype == "BF16") return test_util::BF16Bytes(values);
  return test_util::F32Bytes(values);
}

// The values a float takes once stored as `dtype`.
std::vector<float> RoundedThrough(std::vector<float> values, const std::string& dtype) {
  for (float& v : values) {
    if (dtype == "F16") v = HalfToFloat(FloatToHalf(v));
    if (dtype == "BF16") v = BF16ToFloat(FloatToBF16(v));
  }
  return values;
}

struct Rewrite {
  // The stored dtype of each tensor ("F32", "F16", "BF16"), by canonical name.
  std::function<std::string(const std::string&)> dtype = [](const std::string&) { return "F32"; };
  // Values replaced before encoding (e.g. rounded through another dtype), by canonical name.
  std::function<std::vector<float>(const std::string&, std::vector<float>)> values =
      [](const std::string&, std::vector<float> v) { return v; };
  std::map<std::string, std::string> renames;  // canonical name -> stored name
  // Pad the header so that the data section starts at an odd offset: every tensor misaligned,
  // as in a file from a safetensors writer older than 0.3.0.
  bool misaligned = false;
  nlohmann::json config_edit = nlohmann::json::object();
};

// bloom-tiny-h4 written into a fresh directory `name` as `rewrite` says; returns the directory.
std::string RewriteTinyH4(const std::string& name, const Rewrite& rewrite) {
  std::vector<test_util::TestTensor> tensors;
  for (const auto& [tensor, value] : TinyH4()) {
    const std::string dtype = rewrite.dtype(tensor);
    auto renamed = rewrite.renames.find(tensor);
    tensors.push_back({renamed != rewrite.renames.end() ? renamed->second : tensor, dtype,
                       value.shape, Encode(rewrite.values(tensor, value.values), dtype)});
  }
  test_util::SafetensorsWriteOptions options;
  if (rewrite.misaligned) {
    options.align = 1;
    options.edit_header = [](std::string* header) {
      while ((8 + header->size()) % 8 != 1) header->push_back(' ');
    };
  }
  const std::string dir = test_util::FreshTestDir(name);
  auto config =
      nlohmann::json::parse(ReadFileOrEmpty(FixturePath("models/bloom-tiny-h4/config.json")));
  config.merge_patch(rewrite.config_edit);
  EXPECT_TRUE(test_util::WriteTestFile(dir + "/config.json", config.dump(2)).ok());
  EXPECT_TRUE(test_util::WriteTestFile(dir + "/model.safetensors",
                                       test_util::BuildSafetensors(tensors, options))
                  .ok());
  return dir;
}

// Every token's logits of kPrompt, one prefill on one rank.
std::vector<float> PromptLogits(BloomModel& model) {
  auto out = ForwardDriver(&model, kBlockSize).Prefill({kPrompt});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : std::vector<float>();
}

std::vector<float> PromptLogits(const std::string& dir, Backend* backend) {
  auto model = BloomModel::Load(dir, backend, nullptr);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? PromptLogits(**model) : std::vector<float>();
}

// The same with the model split over two tensor-parallel ranks (threads): each rank imports row
// slices of the column-parallel weights and column slices of the row-parallel ones.
std::vector<float> TensorParallelPromptLogits(const std::string& dir) {
  constexpr int kWorld = 2;
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok()) return {};
  std::shared_ptr<const Checkpoint> shared(std::move(*checkpoint));
  ThreadCommunicatorGroup group(kWorld, std::chrono::seconds(60));
  std::vector<std::unique_ptr<CpuBackend>> backends;
  std::vector<std::unique_ptr<BloomModel>> models;
  std::vector<std::unique_ptr<KvCache>> caches;
  const int32_t blocks = static_cast<int32_t>(kPrompt.size()) / kBlockSize + 1;
  for (int r = 0; r < kWorld; ++r) {
    backends.push_back(std::make_unique<CpuBackend>(1));
    auto model = BloomModel::Load(shared, backends[r].get(), group.communicator(r));
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return {};
    models.push_back(std::move(*model));
    auto cache = models[r]->CreateKvCache(blocks, kBlockSize);
    EXPECT_TRUE(cache.ok()) << cache.status();
    if (!cache.ok()) return {};
    caches.push_back(std::move(*cache));
  }
  StepBatch batch;
  batch.max_blocks_per_seq = blocks;
  std::vector<int32_t> table(blocks);
  for (int32_t b = 0; b < blocks; ++b) table[b] = b;
  batch.AddSequence(kPrompt, 0, table, /*want_logits=*/true, /*all_logits=*/true);
  std::vector<float> logits(kPrompt.size() * models[0]->vocab_size());
  std::vector<absl::Status> status(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      status[r] = models[r]->Forward(batch, *caches[r], r == 0 ? logits.data() : nullptr);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  return logits;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size() || a.empty()) return INFINITY;
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

// ---- Misaligned (unpadded) safetensors files ----

TEST(BloomModelLoadTest, MisalignedCheckpointLoadsTheSameWeightsAsTheAlignedOne) {
  for (const std::string dtype : {"F32", "F16", "BF16"}) {
    SCOPED_TRACE(dtype);
    Rewrite rewrite;
    rewrite.dtype = [dtype](const std::string&) { return dtype; };
    const std::string aligned = RewriteTinyH4("aligned_" + dtype, rewrite);
    rewrite.misaligned = true;
    const std::string misaligned = RewriteTinyH4("misaligned_" + dtype, rewrite);

    auto checkpoint = Checkpoint::Open(misaligned);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    ASSERT_GT((*checkpoint)->files()[0]->misaligned_tensors(), 0u);
    // One warning for the file, naming it and saying that its tensors are copied.
    ASSERT_EQ((*checkpoint)->warnings().size(), 1u);
    EXPECT_TRUE(absl::StrContains((*checkpoint)->warnings()[0], misaligned + "/model.safetensors"))
        << (*checkpoint)->warnings()[0];
    EXPECT_TRUE(absl::StrContains((*checkpoint)->warnings()[0], "copies"))
        << (*checkpoint)->warnings()[0];

    CpuBackend backend(1);
    auto model = BloomModel::Load(misaligned, &backend, nullptr);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->info().weight_dtype, dtype == "F32"   ? DType::kF32
                                             : dtype == "F16" ? DType::kF16
                                                              : DType::kBF16);
    const std::vector<float> want = PromptLogits(aligned, &backend);
    const std::vector<float> got = PromptLogits(**model);
    EXPECT_EQ(MaxAbsDiff(got, want), 0.0f);  // the same weights, the same kernels
    // Tensor parallel: row and column slices of misaligned tensors.
    EXPECT_EQ(MaxAbsDiff(TensorParallelPromptLogits(misaligned), TensorParallelPromptLogits(aligned)),
              0.0f);
  }
}

// ---- Tied checkpoints that kept only lm_head.weight ----

TEST(BloomModelLoadTest, TiedCheckpointWithOnlyLmHeadUsesItAsTheEmbedding) {
  Rewrite rewrite;
  rewrite.renames = {{"word_embeddings.weight", "lm_head.weight"}};
  const std::string dir = RewriteTinyH4("lm_head_only", rewrite);  // no tie_word_embeddings: tied
  CpuBackend backend(1);
  const std::vector<float> want = PromptLogits(FixturePath("models/bloom-tiny-h4"), &backend);
  EXPECT_EQ(MaxAbsDiff(PromptLogits(dir, &backend), want), 0.0f);
  EXPECT_EQ(MaxAbsDiff(TensorParallelPromptLogits(dir),
                       TensorParallelPromptLogits(FixturePath("models/bloom-tiny-h4"))),
            0.0f);

  // Untied, lm_head.weight is another matrix: the embedding is missing, by name.
  rewrite.config_edit = {{"tie_word_embeddings", false}};
  auto untied = BloomModel::Load(RewriteTinyH4("lm_head_only_untied", rewrite), &backend, nullptr);
  ASSERT_FALSE(untied.ok());
  EXPECT_TRUE(absl::IsNotFound(untied.status())) << untied.status();
  EXPECT_TRUE(absl::StrContains(untied.status().message(), "'word_embeddings.weight'"))
      << untied.status();
}

// ---- Mixed dtypes ----

// The CPU backend held to the CUDA backend's dtype rules (kernels/cuda): activations in the
// dtype activation_dtype() was last asked for (the model's compute dtype; CUDA keeps activations
// in it), Linear only with a weight of that dtype, LayerNorm only with weight and bias in one
// dtype. The CPU kernels themselves compute in fp32 as always.
class CudaDTypeRulesBackend : public CpuBackend {
 public:
  CudaDTypeRulesBackend() : CpuBackend(1) {}
  DType activation_dtype(DType weight_dtype) const override {
    activations_ = weight_dtype;
    return CpuBackend::activation_dtype(weight_dtype);
  }
  absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      Activation activation, Tensor out) override {
    const DType w = IsRowPaired(weight.dtype) ? PairedElementDType(weight.dtype) : weight.dtype;
    if (w != activations_) {
      return absl::InvalidArgumentError(absl::StrCat("Linear: bad shapes or dtypes: weight ",
                                                     DTypeName(w), ", activations ",
                                                     DTypeName(activations_)));
    }
    return CpuBackend::Linear(x, weight, bias, activation, out);
  }
  absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor residual, Tensor out) override {
    if (gamma.dtype != beta.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("LayerNorm: bad shapes or dtypes: gamma ",
                                                     DTypeName(gamma.dtype), ", beta ",
                                                     DTypeName(beta.dtype)));
    }
    return CpuBackend::LayerNorm(x, gamma, beta, eps, residual, out);
  }

 private:
  mutable DType activations_ = DType::kF32;
};

TEST(BloomModelLoadTest, F16MatricesWithF32VectorsComputeInF16) {
  // The usual mixed checkpoint: F16 embedding and Linear weights, F32 LayerNorms and biases.
  Rewrite rewrite;
  rewrite.dtype = [](const std::string& name) {
    return name == "word_embeddings.weight" || IsLinearWeight(name) ? "F16" : "F32";
  };
  const std::string dir = RewriteTinyH4("f16_matrices_f32_vectors", rewrite);
  CudaDTypeRulesBackend backend;
  auto model = BloomModel::Load(dir, &backend, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().weight_dtype, DType::kF16);  // what DescribeModel reports
  const std::vector<float> got = PromptLogits(**model);
  CpuBackend cpu(1);
  // F16 rounding of the weights moves the tiny model's logits by about 1e-3.
  EXPECT_LT(MaxAbsDiff(got, PromptLogits(FixturePath("models/bloom-tiny-h4"), &cpu)), 2e-2f);
}

TEST(BloomModelLoadTest, LinearWeightsAreConvertedToTheEmbeddingsDType) {
  // An F32 embedding (and vectors) beside F16 Linear weights: the model computes in F32, the
  // Linear weights converted, exactly, to F32 at load. The reference stores the same F16
  // values as F32.
  Rewrite rewrite;
  rewrite.values = [](const std::string& name, std::vector<float> v) {
    return IsLinearWeight(name) ? RoundedThrough(std::move(v), "F16") : v;
  };
  const std::string reference = RewriteTinyH4("f16_values_as_f32", rewrite);
  rewrite.dtype = [](const std::string& name) { return IsLinearWeight(name) ? "F16" : "F32"; };
  const std::string mixed = RewriteTinyH4("f32_embedding_f16_linears", rewrite);
  CudaDTypeRulesBackend backend;
  auto model = BloomModel::Load(mixed, &backend, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().weight_dtype, DType::kF32);
  const std::vector<float> got = PromptLogits(**model);
  CpuBackend cpu(1);
  EXPECT_EQ(MaxAbsDiff(got, PromptLogits(reference, &cpu)), 0.0f);
  EXPECT_EQ(MaxAbsDiff(TensorParallelPromptLogits(mixed), TensorParallelPromptLogits(reference)),
            0.0f);

  // And the other way round: an F16 embedding with F32 Linear weights computes in F16, the
  // Linear weights rounded to F16 at load, as the reference stores them.
  Rewrite down;
  down.dtype = [](const std::string& name) {
    return name == "word_embeddings.weight" ? "F16" : "F32";
  };
  const std::string f32_linears = RewriteTinyH4("f16_embedding_f32_linears", down);
  down.dtype = [](const std::string& name) {
    return name == "word_embeddings.weight" || IsLinearWeight(name) ? "F16" : "F32";
  };
  const std::string f16_linears = RewriteTinyH4("f16_embedding_f16_linears", down);
  auto f16_model = BloomModel::Load(f32_linears, &backend, nullptr);
  ASSERT_TRUE(f16_model.ok()) << f16_model.status();
  EXPECT_EQ((*f16_model)->info().weight_dtype, DType::kF16);
  EXPECT_EQ(MaxAbsDiff(PromptLogits(**f16_model), PromptLogits(f16_linears, &cpu)), 0.0f);
}

TEST(BloomModelLoadTest, LayerNormWithWeightAndBiasInTwoDTypesLoads) {
  Rewrite rewrite;
  rewrite.values = [](const std::string& name, std::vector<float> v) {
    return absl::EndsWith(name, "input_layernorm.weight") ? RoundedThrough(std::move(v), "BF16")
                                                          : v;
  };
  const std::string reference = RewriteTinyH4("ln_bf16_values_as_f32", rewrite);
  rewrite.dtype = [](const std::string& name) {
    return absl::EndsWith(name, "input_layernorm.weight") ? "BF16" : "F32";
  };
  const std::string mixed = RewriteTinyH4("ln_bf16_weight_f32_bias", rewrite);
  CudaDTypeRulesBackend backend;
  auto model = BloomModel::Load(mixed, &backend, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuBackend cpu(1);
  EXPECT_EQ(MaxAbsDiff(PromptLogits(**model), PromptLogits(reference, &cpu)), 0.0f);
}

}  // namespace
}  // namespace blossom
