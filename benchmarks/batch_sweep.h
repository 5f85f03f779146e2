// The seed's batch-size benchmark, run in-process: for each batch size, greedy generation of
// max_new_tokens for the seed's eight prompts cycled to the batch size; `warmup` untimed
// generate() calls, then `cycles` timed ones. Each timed call tokenizes the prompts inside the
// timed region, as the seed's generate() does.
//
// Results are raw measurements plus the per-batch statistics derived from them (seed lines,
// prefill, decode-step percentiles, tokens per second); the roofline and the output formats live
// in their own libraries. Serving-mode benchmarks (arrivals against the gRPC/HTTP server) will be
// a sibling of this module, reusing the report and chart code, not an option of it.
//
// Thread-safety: RunBatchSweep drives `generator` from the calling thread only; one run at a
// time per generator.
#ifndef BLOSSOM_BENCHMARKS_BATCH_SWEEP_H_
#define BLOSSOM_BENCHMARKS_BATCH_SWEEP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generate/batch_generator.h"
#include "engine/tokenizer/tokenizer.h"

namespace blossom {

// The eight prompts of bloom-ds-inference.py / bloom-accelerate-inference.py.
const std::vector<std::string>& SeedPrompts();

struct SweepOptions {
  std::vector<int32_t> batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  int32_t max_new_tokens = 100;
  int32_t warmup = 1;  // untimed generate() calls per batch size
  int32_t cycles = 5;  // timed generate() calls per batch size (the seed's 5)
  // The seed's padded batch always yields max_new_tokens per row (finished rows keep producing
  // padding); ignoring EOS gives the same exact count without padding.
  bool ignore_eos = true;
  std::vector<std::string> prompts = SeedPrompts();
  // > 0: instead of `prompts`, every sequence's prompt is this many fixed pseudo-random token ids
  // (no tokenizer involved): a long prefill, e.g. the 2048-token one measured against the GEMM
  // rate (sweep_report's prefill roofline).
  int32_t prompt_tokens = 0;
};

// One timed generate(): seconds since the run's origin (monotone within and across cycles).
struct CycleRecord {
  double start_s = 0.0;
  double tokenized_s = 0.0;
  double first_token_s = 0.0;   // the batch's first sampled token
  double prefill_done_s = 0.0;  // every sequence has its first token
  double end_s = 0.0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_s = 0.0;  // BatchGenerator's prefill time (all prompt chunks)
  double decode_s = 0.0;
  int64_t decode_steps = 0;
};

struct Percentiles {
  double mean = 0.0, p50 = 0.0, p90 = 0.0, p99 = 0.0;
};
// Linear interpolation between closest ranks (numpy's default); zeros for no samples.
Percentiles ComputePercentiles(std::vector<double> samples);

struct BatchResult {
  int32_t batch_size = 0;
  std::vector<int32_t> prompt_lengths;  // tokens, per sequence
  std::vector<CycleRecord> cycles;
  std::vector<double> decode_step_s;  // every decode step of every timed cycle

  // Derived (FinishBatch fills these).
  int64_t generated_tokens = 0;    // over the timed cycles
  double timed_s = 0.0;            // sum of the timed cycles' end - start
  double ms_per_token = 0.0;       // seed line 1: timed_s / generated_tokens
  double generate_s = 0.0;         // seed line 3: the first timed cycle
  int64_t generate_tokens = 0;     // seed line 3's token count (all timed cycles, as the seed)
  Percentiles prefill_ms;          // per cycle: tokenized -> every sequence has a token
  Percentiles decode_step_ms;      // one token for every running sequence per step
  double tokens_per_second = 0.0;  // generated_tokens / timed_s (tokenize + prefill + decode)
  double decode_tokens_per_second = 0.0;  // decode-step tokens / decode time
  // Cached tokens the attention reads per decode step, summed over the batch, averaged over
  // steps (exact when every sequence runs max_new_tokens).
  double mean_kv_tokens_per_step = 0.0;
};

// Fills BatchResult's derived fields from its raw fields (exposed for tests).
void FinishBatch(int32_t max_new_tokens, BatchResult* result);

struct SweepRun {
  SweepOptions options;
  std::vector<BatchResult> batches;
};

// InvalidArgument for options no sweep could run with (no or non-positive batch sizes,
// max_new_tokens, cycles; negative warmup or prompt_tokens): checked before a model is loaded.
absl::Status ValidateSweepOptions(const SweepOptions& options);

// Runs the sweep. Timestamps are seconds since `origin`. `on_batch` (optional) sees each batch
// as it completes, for printing progress. Errors from generation name the batch size.
absl::StatusOr<SweepRun> RunBatchSweep(
    BatchGenerator* generator, const Tokenizer* tokenizer, const SweepOptions& options,
    std::chrono::steady_clock::time_point origin,
    const std::function<void(const BatchResult&)>& on_batch = nullptr);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_BATCH_SWEEP_H_
