#include "engine/sampling/cuda_batch_sampler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

// Validate() caps logprobs at kMaxLogprobs; every such row can be scored on the device.
static_assert(kMaxLogprobs <= cuda::kMaxTopLogprobs, "logprob rows the device cannot score");

// The host sampler's id check, for the histories a device row uploads: a bad id fails its row
// alone instead of the whole CudaSampler call.
absl::Status CheckHistory(const cuda::SamplingRow& row, int64_t vocab) {
  const size_t n = static_cast<size_t>(vocab);
  absl::Status status = CheckTokenIds(row.prompt_tokens, "prompt_tokens", n);
  return status.ok() ? CheckTokenIds(row.output_tokens, "output_tokens", n) : status;
}

// The device's top ids and logprobs as SampleResult::top.
std::vector<TokenLogprob> TopOf(const std::vector<int32_t>& ids, const std::vector<float>& values) {
  std::vector<TokenLogprob> top;
  top.reserve(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) top.push_back({ids[t], values[t]});
  return top;
}

}  // namespace

cuda::SamplingRow CudaBatchSampler::DeviceRow(const SampleRow& row, const LogitEdits* edits) {
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
  if (edits != nullptr) {
    out.allowed = edits->allowed;
    out.banned = edits->banned;
    out.bias.reserve(edits->bias.size());
    for (const LogitBias& b : edits->bias) out.bias.push_back({b.token, b.bias});
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CudaBatchSampler>> CudaBatchSampler::Create(CudaBackend* backend) {
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaSampler> sampler,
                           cuda::CudaSampler::Create(backend->stream()));
  return std::unique_ptr<CudaBatchSampler>(new CudaBatchSampler(std::move(sampler)));
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
  if (edits_.size() < rows.size()) edits_.resize(rows.size());

  // Rows by logit row, so that consecutive logit rows go to the GPU in one call. A row that
  // fails here (what Sample() refuses before sampling) gets its error and is left out.
  std::vector<size_t> order;
  std::vector<cuda::SamplingRow> device_rows(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const SampleRow& row = rows[i];
    absl::Status valid = Validate(*row.params, static_cast<int32_t>(vocab));
    const bool edited = valid.ok() && HasLogitEdits(*row.params, row.context);
    if (edited) valid = BuildLogitEdits(*row.params, row.context, vocab, &edits_[i]);
    if (valid.ok()) {
      device_rows[i] = DeviceRow(row, edited ? &edits_[i] : nullptr);
      valid = CheckHistory(device_rows[i], vocab);
    }
    if (!valid.ok()) {
      (*results)[i] = valid;
      continue;
    }
    order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return rows[a].logit_row < rows[b].logit_row; });
  for (size_t k = 1; k < order.size(); ++k) {
    if (rows[order[k]].logit_row == rows[order[k - 1]].logit_row) {
      return absl::InvalidArgumentError(absl::StrCat(
          "two rows sample logit row ", rows[order[k]].logit_row,
          " (the cuda sampler edits logits in place; each row needs its own logits)"));
    }
  }
  std::vector<cuda::SamplingRow> run;
  std::vector<int32_t> tokens;
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin + 1;
    while (end < order.size() &&
           rows[order[end]].logit_row == rows[order[end - 1]].logit_row + 1) {
      ++end;
    }
    run.clear();
    for (size_t k = begin; k < end; ++k) run.push_back(std::move(device_rows[order[k]]));
    tokens.assign(run.size(), 0);
    float* first = static_cast<float*>(logits.data) + rows[order[begin]].logit_row * vocab;
    const absl::Status sampled = sampler_->Sample(first, vocab, run, tokens.data(), &logprobs_);
    for (size_t k = begin; k < end; ++k) {
      absl::StatusOr<SampleResult>& result = (*results)[order[k]];
      const int32_t token = tokens[k - begin];
      const cuda::SampledLogprobs* lp =
          sampled.ok() && run[k - begin].logprobs >= 0 ? &logprobs_[k - begin] : nullptr;
      if (!sampled.ok()) {
        result = sampled;
      } else if (token == cuda::kNonFiniteRow || (lp != nullptr && lp->nonfinite)) {
        result = absl::InternalError("the model produced a non-finite logit");  // as Sample()
      } else if (token == cuda::kNoToken) {
        result = NothingToSampleError();
      } else {
        SampleResult r;
        r.token = token;
        if (lp != nullptr) {
          r.logprob = lp->chosen;
          r.top = TopOf(lp->top_ids, lp->top_logprobs);
        }
        result = std::move(r);
      }
    }
    rows_sampled_ += static_cast<int64_t>(end - begin);
    begin = end;
  }
  return absl::OkStatus();
}

absl::Status CudaBatchSampler::ScoreRows(const Tensor& logits, absl::Span<const ScoreRow> rows,
                                         std::vector<absl::StatusOr<SampleResult>>* results) {
  BLOSSOM_RETURN_IF_ERROR(CheckScoreRows(logits, rows));
  if (logits.device != DeviceKind::kCuda) {
    return absl::InvalidArgumentError("the cuda sampler needs logits in device memory");
  }
  const int64_t vocab = logits.dim(1);
  results->assign(rows.size(), absl::InternalError("row not scored"));
  std::vector<cuda::ScoreRequest> requests;
  std::vector<size_t> which;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].token < 0 || rows[i].token >= vocab) {
      (*results)[i] = absl::InvalidArgumentError(  // RawLogprobs' error
          absl::StrCat("RawLogprobs: token ", rows[i].token, " outside [0, ", vocab, ")"));
      continue;
    }
    requests.push_back({rows[i].logit_row, rows[i].token, rows[i].top_n});
    which.push_back(i);
  }
  BLOSSOM_RETURN_IF_ERROR(sampler_->Score(static_cast<const float*>(logits.data), vocab,
                                          requests, &scored_));
  for (size_t k = 0; k < which.size(); ++k) {
    const cuda::ScoredRow& got = scored_[k];
    if (got.nonfinite) {
      (*results)[which[k]] = absl::InternalError("RawLogprobs: NaN or +inf logit");
      continue;
    }
    SampleResult r;
    r.token = rows[which[k]].token;
    r.logprob = got.logprob;
    r.rank = got.rank;
    r.top = TopOf(got.top_ids, got.top_logprobs);
    (*results)[which[k]] = std::move(r);
  }
  return absl::OkStatus();
}

}  // namespace blossom
