#include "engine/sampling/cuda_batch_sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace blossom {

// Validate() caps logprobs at kMaxLogprobs; every such row can be scored on the device.
static_assert(kMaxLogprobs <= cuda::kMaxTopLogprobs, "logprob rows the device cannot score");

cuda::SamplingRow CudaBatchSampler::DeviceRow(const SampleRow& row) {
  const SamplingParams& p = *row.params;
  cuda::SamplingRow out;
  out.temperature = p.temperature;
  out.top_k = p.top_k;
  out.top_p = p.top_p;
  out.typical_p = p.typical_p;
  out.min_p = p.min_p;
  out.repetition_penalty = p.repetition_penalty;
  out.frequency_penalty = p.frequency_penalty;
  out.presence_penalty = p.presence_penalty;
  out.seed = row.rng->seed();
  out.offset = row.context.output_tokens.size();
  out.logprobs = p.logprobs;
  // Only the penalties read the histories: without them a row carries none, so a step does not
  // copy, check and upload every sequence's whole context (at 256 sequences of a few hundred
  // tokens, most of the sampler's host work).
  if (p.repetition_penalty != 1.0f) {
    out.prompt_tokens.assign(row.context.prompt_tokens.begin(), row.context.prompt_tokens.end());
  }
  if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    out.output_tokens.assign(row.context.output_tokens.begin(), row.context.output_tokens.end());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CudaBatchSampler>> CudaBatchSampler::Create(CudaBackend* backend) {
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaSampler> sampler,
                           cuda::CudaSampler::Create(backend->stream()));
  return std::unique_ptr<CudaBatchSampler>(new CudaBatchSampler(backend, std::move(sampler)));
}

bool CudaBatchSampler::NeedsHost(const SampleRow& row) {
  const SamplingParams& p = *row.params;
  return !row.context.suppressed_tokens.empty() || !p.allowed_token_ids.empty() ||
         !p.bad_words_token_ids.empty() || !p.logit_bias.empty() || !p.choice_token_ids.empty() ||
         p.constraint != nullptr;
}

absl::Status CudaBatchSampler::SampleBatch(const Tensor& logits,
                                           absl::Span<const SampleRow> rows,
                                           std::vector<absl::StatusOr<SampleResult>>* results) {
  BLOSSOM_RETURN_IF_ERROR(CheckSampleRows(logits, rows));
  if (logits.device != DeviceKind::kCuda) {
    return absl::InvalidArgumentError("the cuda sampler needs logits in device memory");
  }
  const int64_t vocab = logits.dim(1);
  results->assign(rows.size(), absl::InternalError("row not sampled"));

  // Device rows by logit row, so that consecutive logit rows go to the GPU in one call.
  std::vector<size_t> on_device;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (NeedsHost(rows[i])) continue;
    // Validate() is what the engine checks at admission; a row failing it is refused here
    // exactly as Sample() refuses it.
    absl::Status valid = Validate(*rows[i].params, static_cast<int32_t>(vocab));
    if (!valid.ok()) {
      (*results)[i] = valid;
      continue;
    }
    on_device.push_back(i);
  }
  std::sort(on_device.begin(), on_device.end(),
            [&](size_t a, size_t b) { return rows[a].logit_row < rows[b].logit_row; });
  for (size_t k = 1; k < on_device.size(); ++k) {
    if (rows[on_device[k]].logit_row == rows[on_device[k - 1]].logit_row) {
      return absl::InvalidArgumentError(absl::StrCat(
          "two rows sample logit row ", rows[on_device[k]].logit_row,
          " (the cuda sampler applies penalties in place; each row needs its own logits)"));
    }
  }
  std::vector<cuda::SamplingRow> run;
  std::vector<int32_t> tokens;
  for (size_t begin = 0; begin < on_device.size();) {
    size_t end = begin + 1;
    while (end < on_device.size() &&
           rows[on_device[end]].logit_row == rows[on_device[end - 1]].logit_row + 1) {
      ++end;
    }
    run.clear();
    for (size_t k = begin; k < end; ++k) run.push_back(DeviceRow(rows[on_device[k]]));
    tokens.assign(run.size(), 0);
    float* first = static_cast<float*>(logits.data) + rows[on_device[begin]].logit_row * vocab;
    const absl::Status sampled = sampler_->Sample(first, vocab, run, tokens.data(), &logprobs_);
    for (size_t k = begin; k < end; ++k) {
      if (!sampled.ok()) {
        (*results)[on_device[k]] = sampled;
        continue;
      }
      const cuda::SampledLogprobs& lp = logprobs_[k - begin];
      if (lp.nonfinite) {
        // Sample()'s error for such a row (the device found it while scoring the logprobs).
        (*results)[on_device[k]] =
            absl::InternalError("the model produced a non-finite logit");
        continue;
      }
      if (tokens[k - begin] == cuda::kNoToken) {
        // Sample()'s error for the same row (sampler.h), for this row alone.
        (*results)[on_device[k]] = absl::FailedPreconditionError(
            "no token can be sampled: every logit is -inf after penalties");
        continue;
      }
      SampleResult result;
      result.token = tokens[k - begin];
      if (run[k - begin].logprobs >= 0) {
        result.logprob = lp.chosen;
        result.top.reserve(lp.top_ids.size());
        for (size_t t = 0; t < lp.top_ids.size(); ++t) {
          result.top.push_back({lp.top_ids[t], lp.top_logprobs[t]});
        }
      }
      (*results)[on_device[k]] = std::move(result);
    }
    device_rows_ += static_cast<int64_t>(end - begin);
    begin = end;
  }

  // Host fallbacks: the row's logits to the host, then exactly the CPU sampler.
  host_row_.resize(static_cast<size_t>(vocab));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!NeedsHost(rows[i])) continue;
    BLOSSOM_RETURN_IF_ERROR(
        backend_->CopyToHost(logits.Rows(rows[i].logit_row, rows[i].logit_row + 1),
                             host_row_.data()));
    (*results)[i] = Sample(host_row_, *rows[i].params, rows[i].context, *rows[i].rng, scratch_);
    ++host_rows_;
  }
  return absl::OkStatus();
}

}  // namespace blossom
