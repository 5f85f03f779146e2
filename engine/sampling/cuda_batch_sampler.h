// BatchSampler over logits in a CudaBackend's device memory: rows the GPU sampler
// (kernels/cuda/cuda_sampling) supports are sampled on the backend's stream and only their token
// ids come back; the other rows are copied to the host one by one and sampled there by Sample(),
// explicitly and counted (host_rows()).
//
// On the device: greedy, temperature, top_k, top_p, typical_p, min_p, repetition / frequency /
// presence penalties, and logprobs (the chosen token's and the top n's, scored on the device so
// that ~200 bytes per row come back instead of the row). On the host (the GPU sampler lacks
// them): suppressed tokens (min_new_tokens), allowed_token_ids, bad words, logit_bias, guided
// choice and structured output. Prompt logprobs are not a sampling row: the engine scores
// them from host logits.
//
// Device logprobs equal the host's (Sample()) to ~1e-6 (sums in another order) with the same ids;
// a logprob row holding a NaN or +inf fails with Sample()'s Internal error, as on the host.
//
// Differences from the host sampler, by design: a device row with temperature > 0 draws from
// CudaSampler's Philox stream at (seed, offset) with seed = the request generator's seed() and
// offset = its output tokens so far, not from the generator's mt19937_64 stream (which it does
// not advance). So a seed reproduces a request on the GPU, but not the CPU's token. Greedy rows
// give the CPU's token (the first maximum after the same penalties). The filters keep the host's
// sets except within rounding of a boundary: at top_p and typical_p the GPU keeps every token
// tied at the threshold (the host breaks top_p ties by id) and compares typicality scores in
// fp32. A CudaSampler error fails
// every row of the consecutive run it sampled (one call per run of consecutive logit rows).
// Rows must name distinct logit rows (penalties are applied to the logits in place). A NaN or
// +inf logit in a row without logprobs is not detected on the device (the host sampler fails
// such a row with Internal); the GPU sampler's token for that row is unspecified.
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

  // Whether `row` must be sampled on the host (see the file comment).
  static bool NeedsHost(const SampleRow& row);
  // The GPU sampler's row for `row`: its parameters, its Philox (seed, offset), and the token
  // histories its penalties read (the prompt for the repetition penalty, the output for every
  // penalty; none without penalties).
  static cuda::SamplingRow DeviceRow(const SampleRow& row);

  // Rows sampled so far on the device and on the host (fallbacks).
  int64_t device_rows() const { return device_rows_; }
  int64_t host_rows() const { return host_rows_; }

 private:
  CudaBatchSampler(CudaBackend* backend, std::unique_ptr<cuda::CudaSampler> sampler)
      : backend_(backend), sampler_(std::move(sampler)) {}

  CudaBackend* const backend_;
  std::unique_ptr<cuda::CudaSampler> sampler_;
  SamplerScratch scratch_;
  std::vector<float> host_row_;  // a fallback row, copied from the device
  std::vector<cuda::SampledLogprobs> logprobs_;  // one run's, reused
  int64_t device_rows_ = 0;
  int64_t host_rows_ = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_CUDA_BATCH_SAMPLER_H_
