#include "benchmarks/batch_sweep.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point origin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
}

// One generate() over the batch, tokenizing inside the timed region.
absl::StatusOr<CycleRecord> RunCycle(BatchGenerator* generator, const Tokenizer* tokenizer,
                                     const SweepOptions& options, int32_t batch_size,
                                     std::chrono::steady_clock::time_point origin,
                                     std::vector<int32_t>* prompt_lengths,
                                     std::vector<double>* decode_steps) {
  CycleRecord cycle;
  cycle.start_s = SecondsSince(origin);
  std::vector<GenerateRequest> requests(batch_size);
  for (int32_t i = 0; i < batch_size; ++i) {
    if (options.prompt_tokens > 0) {
      // Ids from [4, vocab): past BLOOM's special tokens; different per sequence, fixed per run.
      std::mt19937 rng(static_cast<uint32_t>(1000 + i));
      std::uniform_int_distribution<int32_t> id(4, std::max(5, tokenizer->vocab_size()) - 1);
      requests[i].prompt.resize(options.prompt_tokens);
      for (int32_t& t : requests[i].prompt) t = id(rng);
    } else {
      BLOSSOM_ASSIGN_OR_RETURN(requests[i].prompt,
                               tokenizer->Encode(options.prompts[i % options.prompts.size()]));
    }
    if (requests[i].prompt.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt ", i % options.prompts.size(), " encodes to no tokens"));
    }
    requests[i].sampling.temperature = 0.0f;  // greedy, as the seed
    requests[i].stopping.max_new_tokens = options.max_new_tokens;
    requests[i].stopping.ignore_eos = options.ignore_eos;
  }
  cycle.tokenized_s = SecondsSince(origin);
  prompt_lengths->clear();
  for (const GenerateRequest& r : requests) {
    prompt_lengths->push_back(static_cast<int32_t>(r.prompt.size()));
    cycle.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  }

  std::vector<bool> started(batch_size, false);
  int32_t num_started = 0;
  GenerateStats stats;
  absl::StatusOr<std::vector<GenerateResult>> results =
      generator->Generate(requests, &stats, [&](size_t i, const TokenEvent&) {
        if (started[i]) return;
        started[i] = true;
        const double now = SecondsSince(origin);
        if (num_started++ == 0) cycle.first_token_s = now;
        if (num_started == batch_size) cycle.prefill_done_s = now;
      });
  if (!results.ok()) return results.status();
  cycle.end_s = SecondsSince(origin);
  for (const GenerateResult& r : *results) cycle.generated_tokens += r.tokens.size();
  cycle.prefill_s = stats.prefill_seconds;
  cycle.decode_s = stats.decode_seconds;
  cycle.decode_steps = static_cast<int64_t>(stats.decode_step_seconds.size());
  if (decode_steps != nullptr) {
    decode_steps->insert(decode_steps->end(), stats.decode_step_seconds.begin(),
                         stats.decode_step_seconds.end());
  }
  return cycle;
}

}  // namespace

absl::Status ValidateSweepOptions(const SweepOptions& o) {
  if (o.batch_sizes.empty()) return absl::InvalidArgumentError("no batch sizes given");
  for (int32_t b : o.batch_sizes) {
    if (b <= 0)
      return absl::InvalidArgumentError(absl::StrCat("batch size ", b, " is not positive"));
  }
  // The sweep measures decode steps: one new token makes none (its decode numbers would be 0s).
  if (o.max_new_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 2 (the sweep times decode steps), got ",
                     o.max_new_tokens));
  }
  if (o.warmup < 0) return absl::InvalidArgumentError("warmup must be >= 0");
  if (o.cycles <= 0) return absl::InvalidArgumentError("cycles must be positive");
  if (o.prompts.empty() && o.prompt_tokens <= 0) {
    return absl::InvalidArgumentError("no prompts given");
  }
  if (o.prompt_tokens < 0) return absl::InvalidArgumentError("prompt_tokens must be >= 0");
  return absl::OkStatus();
}

const std::vector<std::string>& SeedPrompts() {
  static const std::vector<std::string>* prompts = new std::vector<std::string>{
      "DeepSpeed is a machine learning framework",
      "He is working on",
      "He has a",
      "He got all",
      "Everyone is happy and I can",
      "The new movie that got Oscar this year",
      "In the far far distance from our galaxy,",
      "Peace is the only way",
  };
  return *prompts;
}

Percentiles ComputePercentiles(std::vector<double> samples) {
  Percentiles p;
  if (samples.empty()) return p;
  std::sort(samples.begin(), samples.end());
  double sum = 0.0;
  for (double s : samples) sum += s;
  p.mean = sum / samples.size();
  auto at = [&](double q) {
    const double rank = q * (samples.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (rank - lo) * (samples[hi] - samples[lo]);
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  return p;
}

void FinishBatch(int32_t max_new_tokens, BatchResult* r) {
  r->generated_tokens = 0;
  r->timed_s = 0.0;
  std::vector<double> prefill_ms;
  double decode_s = 0.0;
  int64_t decode_tokens = 0;
  for (const CycleRecord& c : r->cycles) {
    r->generated_tokens += c.generated_tokens;
    r->timed_s += c.end_s - c.start_s;
    prefill_ms.push_back((c.prefill_done_s - c.tokenized_s) * 1000.0);
    decode_s += c.decode_s;
    // Every token after each sequence's first comes from a decode step.
    decode_tokens += c.generated_tokens - r->batch_size;
  }
  r->generate_tokens = r->generated_tokens;
  r->generate_s = r->cycles.empty() ? 0.0 : r->cycles[0].end_s - r->cycles[0].start_s;
  r->ms_per_token = r->generated_tokens > 0 ? r->timed_s * 1000.0 / r->generated_tokens : 0.0;
  r->tokens_per_second = r->timed_s > 0.0 ? r->generated_tokens / r->timed_s : 0.0;
  r->decode_tokens_per_second = decode_s > 0.0 ? decode_tokens / decode_s : 0.0;
  r->prefill_ms = ComputePercentiles(prefill_ms);
  std::vector<double> step_ms;
  for (double s : r->decode_step_s) step_ms.push_back(s * 1000.0);
  r->decode_step_ms = ComputePercentiles(step_ms);
  // Decode step k (1-based, k < max_new_tokens) of a sequence with p prompt tokens reads p + k
  // cached tokens; the mean over k = 1 .. n-1 is p + n/2.
  double kv = 0.0;
  for (int32_t p : r->prompt_lengths) kv += p + max_new_tokens / 2.0;
  r->mean_kv_tokens_per_step = max_new_tokens > 1 ? kv : 0.0;
}

absl::StatusOr<SweepRun> RunBatchSweep(BatchGenerator* generator, const Tokenizer* tokenizer,
                                       const SweepOptions& options,
                                       std::chrono::steady_clock::time_point origin,
                                       const std::function<void(const BatchResult&)>& on_batch) {
  BLOSSOM_RETURN_IF_ERROR(ValidateSweepOptions(options));
  SweepRun run;
  run.options = options;
  for (int32_t batch_size : options.batch_sizes) {
    BatchResult result;
    result.batch_size = batch_size;
    auto fail = [&](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("batch size ", batch_size, ": ", s.message()));
    };
    for (int32_t w = 0; w < options.warmup; ++w) {
      absl::StatusOr<CycleRecord> warm = RunCycle(generator, tokenizer, options, batch_size, origin,
                                                  &result.prompt_lengths, nullptr);
      if (!warm.ok()) return fail(warm.status());
    }
    for (int32_t c = 0; c < options.cycles; ++c) {
      absl::StatusOr<CycleRecord> cycle =
          RunCycle(generator, tokenizer, options, batch_size, origin, &result.prompt_lengths,
                   &result.decode_step_s);
      if (!cycle.ok()) return fail(cycle.status());
      result.cycles.push_back(*cycle);
    }
    FinishBatch(options.max_new_tokens, &result);
    if (on_batch) on_batch(result);
    run.batches.push_back(std::move(result));
  }
  return run;
}

}  // namespace blossom
