// The engine's own time per step, without a model: what scheduling, sampling and streaming add
// to each forward (issue target: under 5% of a step at batch 256).
//
// An InstantRunner stands in for the model: its forward returns at once (or after a simulated
// forward time), its logits claim to be GPU memory so the engine never reads them, and its
// sampler returns a token per row without looking at logits, as the GPU sampler hands the
// engine only token ids. Everything else is the real engine: the scheduler with its paged KV
// blocks and prefix cache, the stop rules (stop strings included), incremental detokenization
// with the model's tokenizer, and event delivery to a sink per request (which copies the text,
// as a server's sink would before writing it out).
//
// The engine may schedule the first request before the others are submitted (its forward then
// waits for the rest): that request runs one step ahead, so the run has one full-batch decode
// step fewer. The report is per decode step at full batch (every request running, no prefill in the step):
// median and p90 of StepStats' schedule, sample, output and deliver parts, their sum, and the
// whole iteration of the engine loop (from one step's report to the next: the previous step's
// events handed to the delivery thread, then this step's parts and its forward, which is
// forward_ms here).
#ifndef BLOSSOM_BENCHMARKS_ENGINE_OVERHEAD_H_
#define BLOSSOM_BENCHMARKS_ENGINE_OVERHEAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace blossom {

struct EngineOverheadOptions {
  std::string model_dir;  // config.json (vocabulary, EOS) and tokenizer.json
  int32_t batch = 256;    // requests, all submitted at once (max_num_seqs = batch)
  int32_t prompt_tokens = 128;
  int32_t new_tokens = 128;
  int32_t stop_strings = 2;  // per request; never matched (the sampled text avoids them)
  double forward_ms = 0.0;   // simulated forward time per step (sleep), 0 = none
  uint64_t seed = 1;
};

struct PartStats {
  double median_ms = 0.0, p90_ms = 0.0;
};

struct EngineOverheadReport {
  int64_t steps = 0;              // every step of the run
  int64_t full_decode_steps = 0;  // decode steps at batch == options.batch: what the parts cover
  int64_t generated_tokens = 0;
  PartStats schedule, sample, output, deliver;
  PartStats host;  // schedule + sample + output + deliver, per step
  PartStats iteration;
  double wall_seconds = 0.0;
};

absl::StatusOr<EngineOverheadReport> RunEngineOverhead(const EngineOverheadOptions& options);

// The report as one JSON object (options included).
std::string EngineOverheadJson(const EngineOverheadOptions& options,
                               const EngineOverheadReport& report);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_ENGINE_OVERHEAD_H_
