// Test helpers for the serving engine's tests: a fixture model (tests/fixtures/models) loaded on
// the CPU backend with its runner and tokenizer, and a greedy request.
#ifndef BLOSSOM_ENGINE_SERVING_ENGINE_TEST_UTIL_H_
#define BLOSSOM_ENGINE_SERVING_ENGINE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/bloom_model.h"
#include "engine/model/model_runner.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/util/fixture_path.h"

namespace blossom::engine_testing {

// A loaded fixture model. An engine owns its runner's KV cache while it lives, so a test that
// needs a second engine alongside (e.g. a reference) loads a second TinyModel.
// Not thread-safe to load or destroy; the runner and tokenizer serve as the engine requires.
class TinyModel {
 public:
  // models/<name> on a 2-thread CPU backend; on failure a gtest failure and null.
  static std::unique_ptr<TinyModel> Load(const std::string& name = "bloom-tiny-h4") {
    std::unique_ptr<TinyModel> tiny(new TinyModel());
    const std::string dir = FixturePath("models/" + name);
    auto model = BloomModel::Load(dir, &tiny->backend_, nullptr);
    if (!model.ok()) {
      ADD_FAILURE() << "loading " << dir << ": " << model.status();
      return nullptr;
    }
    tiny->model_ = std::move(*model);
    tiny->runner_ = ModelRunner::ForModel(tiny->model_.get());
    auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
    if (!tokenizer.ok()) {
      ADD_FAILURE() << "loading " << dir << "/tokenizer.json: " << tokenizer.status();
      return nullptr;
    }
    tiny->tokenizer_ = std::move(*tokenizer);
    return tiny;
  }

  ModelRunner* runner() const { return runner_.get(); }
  Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  TinyModel() = default;

  CpuBackend backend_{2};  // first: outlives the model and runner that use it
  std::unique_ptr<BloomModel> model_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// Greedy decoding of exactly `max_new_tokens` tokens (EOS ignored): deterministic output.
inline EngineRequest GreedyRequest(std::vector<int32_t> prompt, int32_t max_new_tokens) {
  EngineRequest r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.stopping.max_new_tokens = max_new_tokens;
  r.stopping.ignore_eos = true;
  return r;
}

}  // namespace blossom::engine_testing

#endif  // BLOSSOM_ENGINE_SERVING_ENGINE_TEST_UTIL_H_
