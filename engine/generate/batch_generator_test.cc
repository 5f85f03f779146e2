// BatchGenerator samples where the runner leaves the logits (device_sampling, the default) or
// copies them to the host first: on the CPU backend both give bit-identical tokens, logprobs and
// text for a batch mixing greedy, seeded top-k/top-p, penalties, min_new_tokens suppression and
// logprobs. With logits that claim to be GPU memory (PretendDeviceRunner), the generator samples them only through the runner's
// sampler and never asks for host logits.
#include "engine/generate/batch_generator.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "engine/model/bloom_model.h"
#include "engine/model/pretend_device_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

class BatchGeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = std::make_unique<CpuBackend>(2);
    const std::string dir = FixturePath("models/bloom-tiny-h4");
    auto model = BloomModel::Load(dir, backend_.get(), nullptr);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    runner_ = ModelRunner::ForModel(model_.get());
    auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }

  std::vector<GenerateRequest> Requests() const {
    std::vector<GenerateRequest> out;
    auto add = [&](const char* prompt, int32_t n) -> GenerateRequest& {
      GenerateRequest r;
      r.prompt = *tokenizer_->Encode(prompt);
      r.stopping.max_new_tokens = n;
      r.stopping.ignore_eos = true;
      out.push_back(r);
      return out.back();
    };
    add("Hello world, this is", 12).sampling.temperature = 0.0f;
    GenerateRequest& sampled = add("Peace is the only way", 16);
    sampled.sampling.temperature = 0.9f;
    sampled.sampling.top_k = 40;
    sampled.sampling.top_p = 0.9f;
    sampled.sampling.seed = 77;
    sampled.sampling.logprobs = 3;
    GenerateRequest& penalised = add("The the the the", 10);
    penalised.sampling.temperature = 0.0f;
    penalised.sampling.repetition_penalty = 1.3f;
    penalised.sampling.frequency_penalty = 0.5f;
    penalised.sampling.logprobs = 0;
    GenerateRequest& suppressed = add("Once upon a time", 9);
    suppressed.sampling.temperature = 0.7f;
    suppressed.sampling.seed = 5;
    suppressed.stopping.ignore_eos = false;
    suppressed.stopping.min_new_tokens = 6;
    return out;
  }

  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<BloomModel> model_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

void ExpectSame(const std::vector<GenerateResult>& got, const std::vector<GenerateResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
    // (Seeds: the sampled requests set theirs; the greedy ones draw a fresh one per run.)
  }
}

TEST_F(BatchGeneratorTest, SamplingWhereTheLogitsLieMatchesHostCopies) {
  BatchGeneratorOptions host_copy;
  host_copy.device_sampling = false;
  std::vector<GenerateResult> copied, kept;
  {
    BatchGenerator gen(runner_.get(), tokenizer_.get(), host_copy);
    auto out = gen.Generate(Requests());
    ASSERT_TRUE(out.ok()) << out.status();
    copied = *out;
  }
  {
    BatchGenerator gen(runner_.get(), tokenizer_.get());
    auto out = gen.Generate(Requests());
    ASSERT_TRUE(out.ok()) << out.status();
    kept = *out;
  }
  ExpectSame(kept, copied);
  EXPECT_EQ(copied[1].logprobs.size(), copied[1].tokens.size());
  EXPECT_EQ(copied[2].logprobs.size(), copied[2].tokens.size());
  EXPECT_GE(copied[3].tokens.size(), 6u) << "min_new_tokens";
}

TEST_F(BatchGeneratorTest, DeviceLogitsAreSampledOnlyThroughTheRunnersSampler) {
  BatchGeneratorOptions host_copy;
  host_copy.device_sampling = false;
  std::vector<GenerateResult> want;
  {
    BatchGenerator gen(runner_.get(), tokenizer_.get(), host_copy);
    auto out = gen.Generate(Requests());
    ASSERT_TRUE(out.ok()) << out.status();
    want = *out;
  }
  PretendDeviceRunner device(runner_.get());
  int64_t tokens = 0;
  {
    BatchGenerator gen(&device, tokenizer_.get());
    auto out = gen.Generate(Requests());
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectSame(*out, want);
    for (const GenerateResult& r : *out) tokens += static_cast<int64_t>(r.tokens.size());
  }
  EXPECT_EQ(device.host_forwards.load(), 0);
  EXPECT_EQ(device.copied_rows.load(), 0);
  EXPECT_EQ(device.sampled_rows.load(), tokens) << "one sampled row per generated token";
}

TEST_F(BatchGeneratorTest, StepGraphsGiveTheSameTokens) {
  std::vector<GenerateResult> want;
  {
    BatchGenerator gen(runner_.get(), tokenizer_.get());
    auto out = gen.Generate(Requests());
    ASSERT_TRUE(out.ok()) << out.status();
    want = *out;
  }
  // The runner as the server builds it, with graphs (recorded op lists on the cpu backend).
  ModelRunnerOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.threads_per_rank = 2;
  options.prefetch = false;
  options.step_graphs = true;
  options.step_graph_options.max_batch = 4;
  auto graphed = ModelRunner::Create(options);
  ASSERT_TRUE(graphed.ok()) << graphed.status();
  // What the engine does at start: every bucket (1, 2, 4) captured before the first request.
  EXPECT_EQ((*graphed)->WarmUp(64, 4).code(), absl::StatusCode::kFailedPrecondition)
      << "no KV cache yet";
  ASSERT_TRUE((*graphed)->AllocateKvCache(64, 16).ok());
  ASSERT_TRUE((*graphed)->WarmUp(64, 4).ok());
  EXPECT_EQ((*graphed)->step_graph_stats().captured, 3);
  ASSERT_TRUE(runner_->AllocateKvCache(64, 16).ok());
  EXPECT_TRUE(runner_->WarmUp(64, 4).ok()) << "nothing to capture without graphs";
  EXPECT_EQ(runner_->step_graph_stats().captured, 0);
  for (bool device_sampling : {true, false}) {
    BatchGeneratorOptions generator_options;
    generator_options.device_sampling = device_sampling;
    BatchGenerator gen(graphed->get(), tokenizer_.get(), generator_options);
    auto out = gen.Generate(Requests());
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectSame(*out, want);
  }
  // The four requests finish at different steps: decode batches of 4, 3, 2 and 1 sequences.
  const StepGraphStats stats = (*graphed)->step_graph_stats();
  EXPECT_GE(stats.captured, 3);
  EXPECT_GE(stats.replayed, 20);
  EXPECT_EQ(stats.failed, 0);
  EXPECT_EQ(runner_->step_graph_stats().replayed, 0) << "off unless asked for";
}

}  // namespace
}  // namespace blossom

namespace blossom {
namespace {

// Speculative decoding changes the number of steps, never the results: the batch, each request
// alone, and on logits that claim to be device memory (one sampled row per token still).
TEST_F(BatchGeneratorTest, SpeculativeDecodingGivesTheSameResults) {
  std::vector<GenerateRequest> requests = Requests();
  for (GenerateRequest& r : requests) r.stopping.max_new_tokens *= 3;
  BatchGeneratorOptions spec;
  spec.speculative.num_speculative_tokens = 5;
  spec.speculative_max_running = 8;
  std::vector<GenerateResult> plain;
  {
    BatchGenerator gen(runner_.get(), tokenizer_.get());
    auto out = gen.Generate(requests);
    ASSERT_TRUE(out.ok()) << out.status();
    plain = *out;
  }
  int64_t tokens = 0;
  for (const GenerateResult& r : plain) tokens += static_cast<int64_t>(r.tokens.size());
  {
    BatchGenerator gen(runner_.get(), tokenizer_.get(), spec);
    GenerateStats stats;
    auto out = gen.Generate(requests, &stats);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectSame(*out, plain);
    EXPECT_GT(stats.accepted_draft_tokens, 0) << "no draft was ever accepted: vacuous";
    EXPECT_LE(stats.accepted_draft_tokens, stats.draft_tokens);
    EXPECT_EQ(stats.generated_tokens, tokens);
  }
  int64_t accepted_alone = 0, steps_saved = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerateStats off_stats, on_stats;
    BatchGenerator off(runner_.get(), tokenizer_.get());
    auto want = off.Generate({requests[i]}, &off_stats);
    ASSERT_TRUE(want.ok()) << want.status();
    BatchGenerator on(runner_.get(), tokenizer_.get(), spec);
    auto got = on.Generate({requests[i]}, &on_stats);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSame(*got, *want);
    accepted_alone += on_stats.accepted_draft_tokens;
    steps_saved += static_cast<int64_t>(off_stats.decode_step_seconds.size() -
                                        on_stats.decode_step_seconds.size());
  }
  EXPECT_GT(accepted_alone, 0);
  EXPECT_EQ(steps_saved, accepted_alone) << "alone, each accepted draft saves one step";
  PretendDeviceRunner device(runner_.get());
  {
    BatchGenerator gen(&device, tokenizer_.get(), spec);
    auto out = gen.Generate(requests);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectSame(*out, plain);
  }
  EXPECT_EQ(device.host_forwards.load(), 0);
  EXPECT_EQ(device.copied_rows.load(), 0);
  EXPECT_EQ(device.sampled_rows.load(), tokens) << "one sampled row per generated token";
}

// A chat fine-tune lists its end-of-turn token beside EOS in generation_config.json: the model's
// requests end there too, as at EOS (transformers' generate() with a list eos_token_id), unless
// they ignore EOS.
TEST_F(BatchGeneratorTest, GenerationConfigEndTokensStopRequests) {
  GenerateRequest request;
  request.prompt = *tokenizer_->Encode("Hello world, this is");
  request.stopping.max_new_tokens = 12;
  request.sampling.temperature = 0.0f;
  std::vector<int32_t> plain;
  {
    BatchGenerator gen(runner_.get(), tokenizer_.get());
    auto out = gen.Generate({request});
    ASSERT_TRUE(out.ok()) << out.status();
    plain = (*out)[0].tokens;
  }
  ASSERT_GE(plain.size(), 4u);
  const int32_t end_of_turn = plain[3];
  const size_t first = std::find(plain.begin(), plain.end(), end_of_turn) - plain.begin();

  const std::filesystem::path dir =
      std::filesystem::path(std::getenv("TEST_TMPDIR")) / "with-generation-config";
  std::filesystem::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
    std::filesystem::copy_file(FixturePath("models/bloom-tiny-h4") + "/" + file, dir / file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::ofstream(dir / "generation_config.json")
      << "{\"eos_token_id\": [2, " << end_of_turn << "], \"do_sample\": false}";
  auto model = BloomModel::Load(dir.string(), backend_.get(), nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().eos_token_ids, (std::vector<int32_t>{2, end_of_turn}));
  auto runner = ModelRunner::ForModel(model->get());
  BatchGenerator gen(runner.get(), tokenizer_.get());
  auto stopped = gen.Generate({request});
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ((*stopped)[0].tokens, std::vector<int32_t>(plain.begin(), plain.begin() + first + 1));
  EXPECT_EQ((*stopped)[0].finish_reason, FinishReason::kEosToken);
  request.stopping.ignore_eos = true;
  auto ignored = gen.Generate({request});
  ASSERT_TRUE(ignored.ok()) << ignored.status();
  EXPECT_EQ((*ignored)[0].tokens.size(), 12u);
}

}  // namespace
}  // namespace blossom
