#include "engine/sampling/batch_sampler.h"

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace blossom {

absl::Status CheckSampleRows(const Tensor& logits, absl::Span<const SampleRow> rows) {
  if (logits.dtype != DType::kF32 || logits.rank != 2 || logits.empty()) {
    return absl::InvalidArgumentError("logits must be a non-empty fp32 [rows, vocab] tensor");
  }
  for (const SampleRow& row : rows) {
    if (row.logit_row < 0 || row.logit_row >= logits.dim(0)) {
      return absl::InvalidArgumentError(absl::StrCat("logit row ", row.logit_row,
                                                     " outside the step's ", logits.dim(0),
                                                     " rows"));
    }
    if (row.params == nullptr || row.rng == nullptr) {
      return absl::InvalidArgumentError("a sample row without parameters or generator");
    }
  }
  return absl::OkStatus();
}

absl::Status HostBatchSampler::SampleBatch(const Tensor& logits,
                                           absl::Span<const SampleRow> rows,
                                           std::vector<absl::StatusOr<SampleResult>>* results) {
  BLOSSOM_RETURN_IF_ERROR(CheckSampleRows(logits, rows));
  if (logits.device != DeviceKind::kHost) {
    return absl::InvalidArgumentError(
        "the host sampler needs logits in host memory (use the backend's sampler)");
  }
  const int64_t vocab = logits.dim(1);
  const float* data = static_cast<const float*>(logits.data);
  results->clear();
  results->reserve(rows.size());
  for (const SampleRow& row : rows) {
    results->push_back(Sample(absl::MakeConstSpan(data + row.logit_row * vocab, vocab),
                              *row.params, row.context, *row.rng, scratch_));
  }
  return absl::OkStatus();
}

}  // namespace blossom
