// Offline generation for a fixed set of prompts (the batch the seed benchmark measures, and the
// CLI's in-process mode).
//
// All prompts are prefilled (in chunks of at most max_step_tokens tokens per step), then decoded
// together one token per step; a sequence leaves the batch as soon as it finishes. Every
// sequence has its own KV blocks, positions and sampling state, so padding never enters the
// computation and each sequence's output equals its output alone (greedy: bit-identical).
// Each step's tokens are sampled where the runner left the logits (options.device_sampling): in
// place in host memory on the CPU backend, on the GPU with the CUDA backend.
//
// Not thread-safe: one Generate() at a time per generator. The generator allocates the runner's
// KV cache (growing it when a batch needs more blocks), so a runner serves one generator or one
// Engine, not both at once.
#ifndef BLOSSOM_ENGINE_GENERATE_BATCH_GENERATOR_H_
#define BLOSSOM_ENGINE_GENERATE_BATCH_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generate/sequence_output.h"
#include "engine/sampling/batch_sampler.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/model/model_runner.h"
#include "engine/tokenizer/tokenizer.h"

namespace blossom {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StoppingParams stopping;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  std::vector<float> logprobs;  // per token, when requested
  uint64_t seed = 0;
};

struct GenerateStats {
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  // Wall time of each decode step (one token for every unfinished sequence, more where drafts
  // were accepted).
  std::vector<double> decode_step_seconds;
  // Speculative decoding: draft tokens computed, and those kept (each one a step saved).
  int64_t draft_tokens = 0;
  int64_t accepted_draft_tokens = 0;
};

struct BatchGeneratorOptions {
  int32_t block_size = 16;
  int32_t max_step_tokens = 2048;  // bounds activation memory during prefill
  // Sample each step where the runner left its logits (ForwardKeepLogits and the runner's
  // BatchSampler: in place in host memory on "cpu", on the GPU on "cuda"), as the serving engine
  // does with --device_sampling. false: copy the step's logits to the host and sample there.
  // Same tokens either way on the CPU (the host sampler is the per-row sampler).
  bool device_sampling = true;
  // Speculative decoding by prompt lookup (engine/speculative; num_speculative_tokens 0: off),
  // while at most speculative_max_running sequences decode. The same tokens either way.
  NgramProposerConfig speculative;
  int32_t speculative_max_running = 4;
};

class BatchGenerator {
 public:
  // `runner` and `tokenizer` must outlive the generator.
  BatchGenerator(ModelRunner* runner, const Tokenizer* tokenizer,
                 BatchGeneratorOptions options = {});

  // Streams each token as it is produced (optional); returns every sequence's result in order.
  using TokenCallback = std::function<void(size_t request_index, const TokenEvent& event)>;
  absl::StatusOr<std::vector<GenerateResult>> Generate(const std::vector<GenerateRequest>& requests,
                                                       GenerateStats* stats = nullptr,
                                                       const TokenCallback& on_token = nullptr);

 private:
  ModelRunner* runner_;
  const Tokenizer* tokenizer_;
  BatchGeneratorOptions options_;
  // Runs `batch` and samples seqs[sampled[i]]'s token from logits row rows[i], delivering each
  // token in order. With drafts[i] (speculative decoding), rows rows[i] + 1 .. + drafts[i].size()
  // follow: while a sampled token is its draft, the next row is sampled too (one sampler call per
  // round, SampleInRounds), so each draft is sampled exactly as a later step would have sampled it.
  // (*accepted)[i]: how many of drafts[i] were kept (0 without drafts).
  absl::Status StepAndSample(const StepBatch& batch, std::vector<int32_t> sampled,
                             std::vector<int64_t> rows,
                             const std::vector<std::vector<int32_t>>& drafts,
                             std::vector<std::unique_ptr<SequenceOutput>>& seqs,
                             const std::function<void(int32_t, const TokenEvent&)>& deliver,
                             std::vector<int32_t>* accepted);

  int32_t cache_blocks_ = 0;  // blocks of the runner's cache this generator allocated
  std::unique_ptr<BatchSampler> sampler_;  // made on first use; destroyed before the runner
  std::vector<float> host_logits_;         // device_sampling = false
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GENERATE_BATCH_GENERATOR_H_
