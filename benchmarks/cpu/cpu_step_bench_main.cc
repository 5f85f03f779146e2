// cpu-step-bench: Blossom's CPU step timings on one model, as one JSON object on stdout.
//
//   cpu-step-bench --model DIR [--threads 2] [--prompt-tokens 128] [--decode-tokens 32]
//                  [--batch 8] [--bandwidth-mib 512] [--quantize none|int8|int4|bf16]
//                  [--quantize-lm-head] [--kv-cache-dtype auto|bf16]
//
// Measures, in this order, greedy as the peers run, with exact token counts (prompt ids are fixed
// pseudo-random ids, so no tokenizer is involved and every engine gets the same lengths):
//   prefill_ms              one prompt of --prompt-tokens tokens, prompt -> first token
//   decode_ms_per_token     batch 1 after that prompt: median wall time of one decode step
//   batch_tokens_per_s      --batch such prompts decoded together: decode tokens / decode time
//   read_bandwidth_gbs      a multi-threaded read of a --bandwidth-mib MiB buffer with the
//                           widest loads (read_bandwidth.h; best of 5; bytes read only), so
//                           decode_read_bytes / it is the decode memory floor. -1: a buffer
//                           of decode_read_bytes, so that the caches hold as much of it as of
//                           the weights a step reads (this VM's 480 MiB L3 holds a fifth of the
//                           f32 weights and most of the int8 ones: a fixed 512 MiB probe put the
//                           int8 floor anywhere from 23 to 30 ms)
//   decode_read_bytes       weight bytes one decode step reads (weight_bytes less an embedding
//                           table that is not also the LM head)
// cpu_bench.py runs this for each engine build, alternating, and takes medians over runs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "benchmarks/cpu/read_bandwidth.h"
#include "engine/generate/batch_generator.h"
#include "engine/model/model_runner.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/dtype.h"
#include "kernels/weight_quant.h"
#include "tools/cli/dashed_flags.h"

ABSL_FLAG(std::string, model, "", "Model directory.");
ABSL_FLAG(int32_t, threads, 2, "CPU threads.");
ABSL_FLAG(int32_t, prompt_tokens, 128, "Prompt length for the prefill and batch-1 decode.");
ABSL_FLAG(int32_t, decode_tokens, 32, "New tokens per sequence.");
ABSL_FLAG(int32_t, batch, 8, "Sequences decoded together for the throughput point.");
ABSL_FLAG(int32_t, batch_prompt_tokens, 16, "Prompt length of each sequence of the batch.");
ABSL_FLAG(int32_t, bandwidth_mib, 512,
          "Buffer for the read-bandwidth probe in MiB (0 = skip; -1 = the bytes a decode step "
          "reads).");
ABSL_FLAG(std::string, quantize, "none", "Weight quantization at load: none, int8, int4 or bf16.");

ABSL_FLAG(std::string, kv_cache_dtype, "auto", "The KV cache's dtype: auto (fp32 on the CPU) or bf16.");
ABSL_FLAG(bool, quantize_lm_head, false,
          "With --quantize: quantize the LM head too (a tied head gets its own packed copy).");

namespace blossom {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const absl::Status& status) {
  std::cerr << "cpu-step-bench: error: " << status.message() << std::endl;
  return 1;
}

std::vector<int32_t> PromptIds(int32_t n, uint32_t seed, int32_t vocab) {
  std::vector<int32_t> ids(n);
  uint32_t s = seed * 2654435761u + 1;
  const int32_t hi = std::min<int32_t>(vocab, 2000);
  for (int32_t& id : ids) {
    s = s * 1664525u + 1013904223u;
    id = 3 + static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(hi - 3));
  }
  return ids;
}

int Run() {
  ModelRunnerOptions options;
  options.model_dir = absl::GetFlag(FLAGS_model);
  options.threads_per_rank = absl::GetFlag(FLAGS_threads);
  if (options.model_dir.empty()) return Fail(absl::InvalidArgumentError("--model is required"));
  absl::StatusOr<WeightQuant> quantize = ParseWeightQuant(absl::GetFlag(FLAGS_quantize));
  if (!quantize.ok()) return Fail(quantize.status());
  options.quantize = *quantize;
  options.quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  absl::StatusOr<std::optional<DType>> kv_cache_dtype = ParseKvCacheDtype(absl::GetFlag(FLAGS_kv_cache_dtype));
  if (!kv_cache_dtype.ok()) return Fail(kv_cache_dtype.status());
  options.kv_cache_dtype = *kv_cache_dtype;
  auto runner = ModelRunner::Create(options);
  if (!runner.ok()) return Fail(runner.status());
  auto tokenizer = Tokenizer::FromModelDir(options.model_dir, (*runner)->vocab_size());
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  const int32_t vocab = static_cast<int32_t>((*runner)->config().vocab_size);
  BatchGenerator generator(runner->get(), tokenizer->get());

  auto request = [&](int32_t prompt_len, uint32_t seed) {
    GenerateRequest r;
    r.prompt = PromptIds(prompt_len, seed, vocab);
    r.stopping.max_new_tokens = absl::GetFlag(FLAGS_decode_tokens);
    r.stopping.ignore_eos = true;
    // Greedy, as the peers run (peer_bench.py): a sampled request adds a softmax over the whole
    // vocabulary per row and step, which the peers' timings do not include.
    r.sampling.temperature = 0.0f;
    return r;
  };
  // Warm-up (page faults, first-touch of the KV cache), untimed.
  {
    auto warm = generator.Generate({request(8, 99)});
    if (!warm.ok()) return Fail(warm.status());
  }
  GenerateStats one;
  auto single = generator.Generate({request(absl::GetFlag(FLAGS_prompt_tokens), 1)}, &one);
  if (!single.ok()) return Fail(single.status());
  std::vector<double> steps = one.decode_step_seconds;
  std::sort(steps.begin(), steps.end());
  const double decode_ms = steps.empty() ? 0.0 : steps[steps.size() / 2] * 1000.0;

  std::vector<GenerateRequest> batch;
  for (int32_t i = 0; i < absl::GetFlag(FLAGS_batch); ++i)
    batch.push_back(request(absl::GetFlag(FLAGS_batch_prompt_tokens), 10 + i));
  GenerateStats many;
  auto batched = generator.Generate(batch, &many);
  if (!batched.ok()) return Fail(batched.status());
  const double batch_decode_tokens =
      static_cast<double>(many.decode_step_seconds.size()) * absl::GetFlag(FLAGS_batch);

  const ModelInfo& info = (*runner)->info();
  // What one decode step reads: every weight but the embedding table, unless that same table is
  // the LM head (tied and not quantized separately); a lookup reads only a few of its rows.
  const BloomConfig& config = (*runner)->config();
  const bool head_is_embedding = config.tie_word_embeddings && !info.quantize_lm_head;
  const uint64_t embedding_bytes = static_cast<uint64_t>(config.vocab_size) * config.hidden_size *
                                   DTypeSize(info.weight_dtype);
  const uint64_t decode_read_bytes =
      info.weight_bytes_this_rank - (head_is_embedding ? 0 : embedding_bytes);
  const int32_t probe_mib = absl::GetFlag(FLAGS_bandwidth_mib);
  const size_t probe_bytes = probe_mib < 0 ? static_cast<size_t>(decode_read_bytes)
                                           : static_cast<size_t>(probe_mib) << 20;
  const double bandwidth =
      probe_mib != 0 ? ReadBandwidthGbs(probe_bytes, std::max(1, absl::GetFlag(FLAGS_threads)))
                     : 0.0;
  std::cout << absl::StrFormat(
                   "{\"weight_dtype\": \"%s\", \"quantize\": \"%s%s\", \"weight_bytes\": %d, "
                   "\"decode_read_bytes\": %d, \"threads\": %d, "
                   "\"prompt_tokens\": %d, \"prefill_ms\": %.3f, \"decode_tokens\": %d, "
                   "\"decode_ms_per_token\": %.3f, \"batch\": %d, \"batch_tokens_per_s\": %.3f, "
                   "\"read_bandwidth_gbs\": %.3f, \"read_width\": \"%s\"}",
                   DTypeName(info.weight_dtype), WeightQuantName(info.quantize),
                   info.quantize_lm_head ? "+head" : "",
                   info.weight_bytes_this_rank, decode_read_bytes,
                   absl::GetFlag(FLAGS_threads), one.prompt_tokens, one.prefill_seconds * 1000.0,
                   static_cast<int>(steps.size()), decode_ms, absl::GetFlag(FLAGS_batch),
                   many.decode_seconds > 0 ? batch_decode_tokens / many.decode_seconds : 0.0,
                   bandwidth, ReadWidthName(WidestReadWidth()))
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  blossom::NormalizeDashedFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  return blossom::Run();
}
