// BatchSampler over logits in a CudaBackend's device memory: every row is sampled on the
// backend's stream by the GPU sampler (kernels/cuda/cuda_sampling), and only token ids and the
// logprobs a request asked for (~200 bytes per row) come back, never a logits row.
//
// Everything of sampler.h's order runs there: step 1 arrives as data built on the host per row
// (logit_edits.h: the allow bitmask of allowed_token_ids, guided choice and a
// structured-output constraint, about 31 KB per masked row at BLOOM's vocabulary; bad words and
// suppressed tokens as bans; logit_bias), then penalties, temperature, top_k, top_p, typical_p,
// min_p and the draw; logprobs are scored from the raw row, and so are prompt logprobs
// (ScoreRows). With --device_sampling=false the engine copies the logits and uses
// HostBatchSampler instead.
//
// Differences from the host sampler (Sample()), by design:
//  - a row with temperature > 0 draws from CudaSampler's Philox stream at (seed, offset) with
//    seed = the request generator's seed() and offset = its output tokens so far, not from the
//    generator's mt19937_64 stream (which it does not advance): a seed reproduces a request on
//    the GPU, but not the CPU's token. Greedy rows give the CPU's token (the first maximum after
//    the same edits and penalties);
//  - the filters keep the host's sets except within rounding of a boundary: at top_p and
//    typical_p the GPU keeps every token tied at the threshold (the host breaks top_p ties by
//    id) and compares typicality scores in fp32;
//  - logprobs equal the host's to ~1e-6 (sums in another order), with the same ids;
// Per-row failures are the row's alone, with the host's codes: Validate()'s errors, an id outside
// the vocabulary, the constraint's error, a NaN or +inf logit (Internal), nothing left to sample
// (FailedPrecondition). A CudaSampler
// error fails every row of the consecutive run it sampled (one call per run of consecutive logit
// rows). Rows must name distinct logit rows (edits and penalties are applied in place).
//
// Thread-safety: one thread at a time, whose current device is the backend's (as for every
// CudaBackend call).
#ifndef BLOSSOM_ENGINE_SAMPLING_CUDA_BATCH_SAMPLER_H_
#define BLOSSOM_ENGINE_SAMPLING_CUDA_BATCH_SAMPLER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling/batch_sampler.h"
#include "engine/sampling/logit_edits.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_sampling.h"

namespace blossom {

class CudaBatchSampler : public BatchSampler {
 public:
  // `backend` must outlive the sampler; logits come from its device. FailedPrecondition without
  // a usable GPU.
  static absl::StatusOr<std::unique_ptr<CudaBatchSampler>> Create(CudaBackend* backend);

  std::string name() const override { return "cuda"; }
  absl::Status SampleBatch(const Tensor& logits, absl::Span<const SampleRow> rows,
                           std::vector<absl::StatusOr<SampleResult>>* results) override;
  // On the device too (CudaSampler::Score): one call for all the rows, ~200 bytes back per row.
  absl::Status ScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows,
                         std::vector<absl::StatusOr<SampleResult>>* results) override;

  // The GPU sampler's row for `row`: its parameters, its Philox (seed, offset), the token
  // histories its penalties read (the prompt for the repetition penalty, the output for every
  // penalty; none without penalties) and step 1's `edits` (null: none). The row views
  // edits->allowed, which must outlive it.
  static cuda::SamplingRow DeviceRow(const SampleRow& row, const LogitEdits* edits);

  // Rows sampled so far.
  int64_t rows_sampled() const { return rows_sampled_; }

 private:
  explicit CudaBatchSampler(std::unique_ptr<cuda::CudaSampler> sampler)
      : sampler_(std::move(sampler)) {}

  std::unique_ptr<cuda::CudaSampler> sampler_;
  std::vector<LogitEdits> edits_;                 // per row of the call, reused
  std::vector<cuda::SampledLogprobs> logprobs_;  // one run's, reused
  std::vector<cuda::ScoredRow> scored_;           // one ScoreRows call's, reused
  int64_t rows_sampled_ = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_CUDA_BATCH_SAMPLER_H_
