// Sampling for a whole step: one call per step takes the logits where the backend left them and
// returns, per row, the token and the logprobs the request asked for (SampleResult). The engine
// has this one path whatever the backend; a backend-specific sampler (cuda_batch_sampler on the
// GPU) decides per row whether it can sample there or must bring the row to the host.
//
// Results are those of Sample() (sampler.h) for the row's params, context and generator, except
// where an implementation documents otherwise (the CUDA sampler draws sampled rows from its own
// per-seed stream, see cuda_batch_sampler.h).
#ifndef BLOSSOM_ENGINE_SAMPLING_BATCH_SAMPLER_H_
#define BLOSSOM_ENGINE_SAMPLING_BATCH_SAMPLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampling_params.h"
#include "kernels/tensor.h"

namespace blossom {

// One logits row to sample: which row of the step's logits, the request's parameters, history
// (SamplingContext views: the caller keeps them alive for the call) and generator.
struct SampleRow {
  int64_t logit_row = 0;
  const SamplingParams* params = nullptr;
  SamplingContext context;
  RequestRng* rng = nullptr;
};

// One logits row to score against a known token: prompt logprobs (the row at prompt position p
// scored against prompt token p + 1).
struct ScoreRow {
  int64_t logit_row = 0;
  int32_t token = 0;
  int32_t top_n = 0;  // [0, kMaxLogprobs]
};

// Thread-safety: one thread at a time (implementations own scratch buffers).
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;

  virtual std::string name() const = 0;

  // Samples rows[i] into (*results)[i] (resized to rows.size()). `logits` is fp32
  // [logit rows, vocab] on the host or on the sampler's device; an implementation may overwrite
  // the rows it samples (the CUDA one applies penalties in place). Per-row errors go into the
  // row's result (one bad request fails only itself), with Sample()'s codes. The returned status
  // is for the call as a whole: InvalidArgument for a logits tensor that is not fp32 rank 2, a
  // row outside it, or logits on a device the sampler cannot read; a device error.
  virtual absl::Status SampleBatch(const Tensor& logits, absl::Span<const SampleRow> rows,
                                   std::vector<absl::StatusOr<SampleResult>>* results) = 0;

  // Scores rows[i] into (*results)[i] (resized to rows.size()): RawLogprobs() of the row for its
  // token, with the rank and the top_n most likely tokens (sampler.h), where the logits lie.
  // Call it before SampleBatch on the same logits (sampling may edit rows in place). Per-row
  // errors (a NaN or +inf logit: Internal; a token outside the row: InvalidArgument) go into the
  // row's result; the returned status is for the call, as for SampleBatch.
  virtual absl::Status ScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows,
                                 std::vector<absl::StatusOr<SampleResult>>* results) = 0;
};

// Logits in host memory: Sample() on each row, in order. Bit-identical to calling Sample() per
// row (the same tokens, logprobs and generator draws).
class HostBatchSampler : public BatchSampler {
 public:
  std::string name() const override { return "host"; }
  absl::Status SampleBatch(const Tensor& logits, absl::Span<const SampleRow> rows,
                           std::vector<absl::StatusOr<SampleResult>>* results) override;
  absl::Status ScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows,
                         std::vector<absl::StatusOr<SampleResult>>* results) override;

 private:
  SamplerScratch scratch_;
};

// InvalidArgument unless `logits` is an fp32 [rows, vocab] tensor holding every row of `rows`
// (any device). Shared by the implementations.
absl::Status CheckSampleRows(const Tensor& logits, absl::Span<const SampleRow> rows);
absl::Status CheckScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_BATCH_SAMPLER_H_
