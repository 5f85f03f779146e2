// Test helpers shared by the tensor-parallel tests: run prompts through any ModelRunner (one
// prefill step, or greedy decoding) and compare with the Hugging Face golden files of
// tests/fixtures/goldens/<model>/ (golden.json, golden.safetensors).
//
// Thread-safety: none needed (test code; each call drives its runner from the calling thread).
#ifndef BLOSSOM_ENGINE_MODEL_TP_TEST_UTIL_H_
#define BLOSSOM_ENGINE_MODEL_TP_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/loader/safetensors.h"
#include "engine/model/model_runner.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace tp_test {

constexpr int32_t kBlockSize = 4;

// max |a - b| (sizes must match: an EXPECT failure otherwise); infinity if either side holds a
// NaN or an infinity.
float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

// Prefills every prompt together in one step (each with its own blocks) and returns all-token
// logits per prompt. Allocates the runner's KV cache.
std::vector<std::vector<float>> PrefillAll(ModelRunner& runner,
                                           const std::vector<std::vector<int32_t>>& prompts);

// Greedy continuation of all prompts decoded together, argmax over the full vocabulary.
std::vector<std::vector<int32_t>> GreedyAll(ModelRunner& runner,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            int new_tokens);

// One fixture model's golden files.
struct Golden {
  nlohmann::json json;  // discarded (is_discarded()) when unreadable
  std::unique_ptr<SafetensorsFile> logits;
  std::vector<std::vector<int32_t>> logit_prompts;  // golden.json "logits"[i].input_ids
  std::vector<std::string> logit_names;             // their tensors in golden.safetensors
  std::vector<std::vector<int32_t>> greedy_prompts, greedy_new_ids;
  // The fp32 tensor `name` of golden.safetensors (empty, with an EXPECT failure, if absent).
  std::vector<float> Tensor(const std::string& name) const;
};
// EXPECT failures (and an empty Golden) when the files cannot be read.
Golden LoadGolden(const std::string& model);

}  // namespace tp_test
}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_TP_TEST_UTIL_H_
