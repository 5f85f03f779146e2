#include "engine/sampling/batch_sampler.h"

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

// An fp32 [rows, vocab] tensor holding every row's logit_row (any device).
template <typename Row>
absl::Status CheckLogitRows(const Tensor& logits, absl::Span<const Row> rows) {
  if (logits.dtype != DType::kF32 || logits.rank != 2 || logits.empty()) {
    return absl::InvalidArgumentError("logits must be a non-empty fp32 [rows, vocab] tensor");
  }
  for (const Row& row : rows) {
    if (row.logit_row < 0 || row.logit_row >= logits.dim(0)) {
      return absl::InvalidArgumentError(absl::StrCat("logit row ", row.logit_row,
                                                     " outside the step's ", logits.dim(0),
                                                     " rows"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOnHost(const Tensor& logits) {
  if (logits.device != DeviceKind::kHost) {
    return absl::InvalidArgumentError(
        "the host sampler needs logits in host memory (use the backend's sampler)");
  }
  return absl::OkStatus();
}

absl::Span<const float> HostRow(const Tensor& logits, int64_t row) {
  const int64_t vocab = logits.dim(1);
  return absl::MakeConstSpan(static_cast<const float*>(logits.data) + row * vocab,
                             static_cast<size_t>(vocab));
}

}  // namespace

absl::Status CheckSampleRows(const Tensor& logits, absl::Span<const SampleRow> rows) {
  BLOSSOM_RETURN_IF_ERROR(CheckLogitRows(logits, rows));
  for (const SampleRow& row : rows) {
    if (row.params == nullptr || row.rng == nullptr) {
      return absl::InvalidArgumentError("a sample row without parameters or generator");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows) {
  BLOSSOM_RETURN_IF_ERROR(CheckLogitRows(logits, rows));
  for (const ScoreRow& row : rows) {
    if (row.top_n < 0 || row.top_n > kMaxLogprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat("top_n ", row.top_n, " outside [0, ", kMaxLogprobs, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status HostBatchSampler::SampleBatch(const Tensor& logits,
                                           absl::Span<const SampleRow> rows,
                                           std::vector<absl::StatusOr<SampleResult>>* results) {
  BLOSSOM_RETURN_IF_ERROR(CheckSampleRows(logits, rows));
  BLOSSOM_RETURN_IF_ERROR(CheckOnHost(logits));
  results->clear();
  results->reserve(rows.size());
  for (const SampleRow& row : rows) {
    results->push_back(
        Sample(HostRow(logits, row.logit_row), *row.params, row.context, *row.rng, scratch_));
  }
  return absl::OkStatus();
}

absl::Status HostBatchSampler::ScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows,
                                         std::vector<absl::StatusOr<SampleResult>>* results) {
  BLOSSOM_RETURN_IF_ERROR(CheckScoreRows(logits, rows));
  BLOSSOM_RETURN_IF_ERROR(CheckOnHost(logits));
  results->clear();
  results->reserve(rows.size());
  for (const ScoreRow& row : rows) {
    results->push_back(RawLogprobs(HostRow(logits, row.logit_row), row.token, row.top_n));
  }
  return absl::OkStatus();
}

}  // namespace blossom
