#include "kernels/cuda/cuda_sampling.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/sampling_launch.h"

namespace blossom {
namespace cuda {
namespace {

absl::Status CudaError(const char* what, cudaError_t err) {
  return absl::InternalError(absl::StrCat("cuda sampler: ", what, ": ", cudaGetErrorString(err)));
}

size_t Align(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

float CudaSampler::Uniform(uint64_t seed, uint64_t offset) { return PhiloxUniform(seed, offset); }

absl::StatusOr<std::unique_ptr<CudaSampler>> CudaSampler::Create(void* stream) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda sampler: no usable CUDA device: ", err != cudaSuccess ? cudaGetErrorString(err) : "none visible"));
  }
  std::unique_ptr<CudaSampler> sampler(new CudaSampler());
  sampler->stream_ = stream;
  return sampler;
}

CudaSampler::~CudaSampler() {
  if (device_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaFree(device_);
  }
  if (host_ != nullptr) cudaFreeHost(host_);
}

absl::Status CudaSampler::Reserve(size_t bytes) {
  if (bytes <= capacity_) return absl::OkStatus();
  const size_t grown = std::max(bytes, 2 * capacity_);
  if (device_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaFree(device_);
    device_ = nullptr;
  }
  if (host_ != nullptr) {
    cudaFreeHost(host_);
    host_ = nullptr;
  }
  capacity_ = 0;
  cudaError_t err = cudaMalloc(&device_, grown);
  if (err != cudaSuccess) {
    cudaGetLastError();
    device_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat("cuda sampler: cannot allocate ", grown, " bytes"));
  }
  err = cudaHostAlloc(&host_, grown, cudaHostAllocDefault);
  if (err != cudaSuccess) return CudaError("cudaHostAlloc", err);
  capacity_ = grown;
  return absl::OkStatus();
}

static_assert(kMaxTopLogprobs == kRowTopLogprobs, "the public and kernel logprob caps differ");

namespace {

// Validates one row against the vocabulary (the whole call fails on a bad row: callers that
// need per-row failures check first, as CudaBatchSampler does).
absl::Status CheckRow(const SamplingRow& row, int32_t r, int64_t vocab) {
  if (!(row.temperature >= 0.0f) || !(row.top_p > 0.0f && row.top_p <= 1.0f) ||
      !(row.typical_p > 0.0f && row.typical_p <= 1.0f) ||
      !(row.min_p >= 0.0f && row.min_p <= 1.0f) || !(row.repetition_penalty > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda sampler: row ", r,
        ": temperature must be >= 0, top_p and typical_p in (0, 1], min_p in [0, 1], "
        "repetition_penalty > 0"));
  }
  if (row.logprobs < -1 || row.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("cuda sampler: row ", r, ": logprobs ",
                                                   row.logprobs, " outside [-1, ",
                                                   kMaxTopLogprobs, "]"));
  }
  for (const std::vector<int32_t>* ids : {&row.prompt_tokens, &row.output_tokens, &row.banned}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("cuda sampler: row ", r, ": token id ", id, " outside [0, ", vocab, ")"));
      }
    }
  }
  for (const TokenBias& b : row.bias) {
    if (b.token < 0 || b.token >= vocab || !std::isfinite(b.bias)) {
      return absl::InvalidArgumentError(absl::StrCat("cuda sampler: row ", r, ": bias ", b.bias,
                                                     " for token ", b.token));
    }
  }
  // The edit kernel adds each bias from its own thread: a token biased twice would race.
  std::vector<int32_t> biased;
  biased.reserve(row.bias.size());
  for (const TokenBias& b : row.bias) biased.push_back(b.token);
  std::sort(biased.begin(), biased.end());
  if (std::adjacent_find(biased.begin(), biased.end()) != biased.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda sampler: row ", r, ": a token is biased more than once"));
  }
  const size_t words = static_cast<size_t>((vocab + 63) / 64);
  if (!row.allowed.empty() && row.allowed.size() != words) {
    return absl::InvalidArgumentError(absl::StrCat("cuda sampler: row ", r, ": allow mask of ",
                                                   row.allowed.size(), " words, not ", words));
  }
  return absl::OkStatus();
}

// `error`, once the stream has finished what was queued: the upload may still be reading the
// pinned buffer, which the next call rewrites.
absl::Status Drained(cudaStream_t stream, absl::Status error) {
  cudaStreamSynchronize(stream);  // its own error is the device's, already in `error` or moot
  return error;
}

// A row's top entries, at most `asked` (the device never writes more, but a count is never
// trusted past the arrays).
void CopyTop(const RowLogprobs& row, int32_t asked, std::vector<int32_t>* ids,
             std::vector<float>* logprobs) {
  const int32_t count = std::min(std::max(row.count, 0), asked);
  ids->assign(row.top_ids, row.top_ids + count);
  logprobs->assign(row.top_logprobs, row.top_logprobs + count);
}

// Byte offsets of the regions of one call's buffer, appended in order, each 16-byte aligned.
class Layout {
 public:
  size_t Add(size_t bytes) {
    const size_t at = end_;
    end_ = Align(end_ + bytes);
    return at;
  }
  size_t end() const { return end_; }

 private:
  size_t end_ = 0;
};

}  // namespace

static_assert(sizeof(TokenBias) == sizeof(RowBias), "TokenBias and RowBias share a layout");

absl::Status CudaSampler::Sample(float* logits, int64_t vocab, absl::Span<const SamplingRow> rows,
                                 int32_t* tokens, std::vector<SampledLogprobs>* logprobs) {
  const int32_t n = static_cast<int32_t>(rows.size());
  if (n == 0) return absl::OkStatus();
  if (logits == nullptr || vocab <= 0 || vocab > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("cuda sampler: bad logits or vocab ", vocab));
  }
  size_t prompt_total = 0, output_total = 0, banned_total = 0, bias_total = 0, masked_rows = 0;
  bool any_penalty = false, any_logprobs = false;
  for (int32_t r = 0; r < n; ++r) {
    const SamplingRow& row = rows[r];
    absl::Status valid = CheckRow(row, r, vocab);
    if (!valid.ok()) return valid;
    any_logprobs = any_logprobs || row.logprobs >= 0;
    prompt_total += row.prompt_tokens.size();
    output_total += row.output_tokens.size();
    banned_total += row.banned.size();
    bias_total += row.bias.size();
    masked_rows += row.allowed.empty() ? 0 : 1;
    any_penalty = any_penalty || row.repetition_penalty != 1.0f || row.frequency_penalty != 0.0f ||
                  row.presence_penalty != 0.0f;
  }
  if (any_logprobs && logprobs == nullptr) {
    return absl::InvalidArgumentError(
        "cuda sampler: a row asks for logprobs but there is no output for them");
  }
  const bool any_edits = banned_total + bias_total + masked_rows > 0;
  const size_t words = static_cast<size_t>((vocab + 63) / 64);
  // Uploaded: [0, upload_end). Downloaded: [out_at, download_end). Then device-only scratch.
  Layout layout;
  const size_t params_at = layout.Add(n * sizeof(RowSamplingParams));
  const size_t pstart_at = layout.Add((n + 1) * sizeof(int32_t));
  const size_t ostart_at = layout.Add((n + 1) * sizeof(int32_t));
  const size_t bstart_at = layout.Add((n + 1) * sizeof(int32_t));
  const size_t biasstart_at = layout.Add((n + 1) * sizeof(int32_t));
  const size_t aoffset_at = layout.Add(n * sizeof(int64_t));
  const size_t ptok_at = layout.Add(prompt_total * sizeof(int32_t));
  const size_t otok_at = layout.Add(output_total * sizeof(int32_t));
  const size_t banned_at = layout.Add(banned_total * sizeof(int32_t));
  const size_t bias_at = layout.Add(bias_total * sizeof(RowBias));
  const size_t words_at = layout.Add(masked_rows * words * sizeof(uint64_t));
  const size_t out_at = layout.Add(n * sizeof(int32_t));
  const size_t upload_end = out_at;
  const size_t lp_at = layout.Add(any_logprobs ? n * sizeof(RowLogprobs) : 0);
  const size_t download_end = layout.end();
  const size_t raw_prompt_at = layout.Add(any_logprobs ? prompt_total * sizeof(float) : 0);
  const size_t raw_output_at = layout.Add(any_logprobs ? output_total * sizeof(float) : 0);
  const size_t raw_bias_at = layout.Add(any_logprobs ? bias_total * sizeof(float) : 0);
  const size_t nonfinite_at = layout.Add(any_edits ? n * sizeof(int32_t) : 0);
  absl::Status s = Reserve(layout.end());
  if (!s.ok()) return s;
  // The previous call's transfers finished (it synchronised), so the pinned buffer is free.
  char* h = static_cast<char*>(host_);
  auto* params = reinterpret_cast<RowSamplingParams*>(h + params_at);
  auto* pstart = reinterpret_cast<int32_t*>(h + pstart_at);
  auto* ostart = reinterpret_cast<int32_t*>(h + ostart_at);
  auto* bstart = reinterpret_cast<int32_t*>(h + bstart_at);
  auto* biasstart = reinterpret_cast<int32_t*>(h + biasstart_at);
  auto* aoffset = reinterpret_cast<int64_t*>(h + aoffset_at);
  auto* ptok = reinterpret_cast<int32_t*>(h + ptok_at);
  auto* otok = reinterpret_cast<int32_t*>(h + otok_at);
  auto* banned = reinterpret_cast<int32_t*>(h + banned_at);
  auto* bias = reinterpret_cast<RowBias*>(h + bias_at);
  auto* allowed = reinterpret_cast<uint64_t*>(h + words_at);
  pstart[0] = ostart[0] = bstart[0] = biasstart[0] = 0;
  int64_t next_mask = 0;
  for (int32_t r = 0; r < n; ++r) {
    const SamplingRow& row = rows[r];
    RowSamplingParams p;
    p.temperature = row.temperature;
    p.top_k = row.top_k;
    p.top_p = row.top_p;
    p.typical_p = row.typical_p;
    p.min_p = row.min_p;
    p.repetition_penalty = row.repetition_penalty;
    p.frequency_penalty = row.frequency_penalty;
    p.presence_penalty = row.presence_penalty;
    p.seed = row.seed;
    p.offset = row.offset;
    p.logprobs = row.logprobs;
    params[r] = p;
    auto append = [](const auto& from, auto* to, int32_t* start, int32_t r) {
      if (!from.empty()) std::memcpy(to + start[r], from.data(), from.size() * sizeof(from[0]));
      start[r + 1] = start[r] + static_cast<int32_t>(from.size());
    };
    append(row.prompt_tokens, ptok, pstart, r);
    append(row.output_tokens, otok, ostart, r);
    append(row.banned, banned, bstart, r);
    append(row.bias, bias, biasstart, r);
    aoffset[r] = -1;
    if (!row.allowed.empty()) {
      aoffset[r] = next_mask * static_cast<int64_t>(words);
      std::memcpy(allowed + aoffset[r], row.allowed.data(), words * sizeof(uint64_t));
      ++next_mask;
    }
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  cudaError_t err = cudaMemcpyAsync(device_, host_, upload_end, cudaMemcpyHostToDevice, stream);
  if (err != cudaSuccess) return CudaError("upload", err);
  char* d = static_cast<char*>(device_);
  SamplingLaunchArgs a;
  a.logits = logits;
  a.rows = n;
  a.vocab = vocab;
  a.params = reinterpret_cast<const RowSamplingParams*>(d + params_at);
  a.prompt_start = reinterpret_cast<const int32_t*>(d + pstart_at);
  a.prompt_tokens = reinterpret_cast<const int32_t*>(d + ptok_at);
  a.output_start = reinterpret_cast<const int32_t*>(d + ostart_at);
  a.output_tokens = reinterpret_cast<const int32_t*>(d + otok_at);
  a.out_tokens = reinterpret_cast<int32_t*>(d + out_at);
  a.any_penalty = any_penalty;
  a.allowed_offset = reinterpret_cast<const int64_t*>(d + aoffset_at);
  a.allowed_words = reinterpret_cast<const uint64_t*>(d + words_at);
  a.banned_start = reinterpret_cast<const int32_t*>(d + bstart_at);
  a.banned_tokens = reinterpret_cast<const int32_t*>(d + banned_at);
  a.bias_start = reinterpret_cast<const int32_t*>(d + biasstart_at);
  a.bias = reinterpret_cast<const RowBias*>(d + bias_at);
  a.any_edits = any_edits;
  if (any_edits) a.nonfinite_rows = reinterpret_cast<int32_t*>(d + nonfinite_at);
  if (any_logprobs) {
    a.out_logprobs = reinterpret_cast<RowLogprobs*>(d + lp_at);
    a.raw_prompt = reinterpret_cast<float*>(d + raw_prompt_at);
    a.raw_output = reinterpret_cast<float*>(d + raw_output_at);
    a.raw_bias = reinterpret_cast<float*>(d + raw_bias_at);
  }
  err = LaunchSampling(a, stream);
  if (err != cudaSuccess) return Drained(stream, CudaError("LaunchSampling", err));
  err = cudaMemcpyAsync(h + out_at, d + out_at, download_end - out_at, cudaMemcpyDeviceToHost,
                        stream);
  if (err != cudaSuccess) return Drained(stream, CudaError("download", err));
  err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return CudaError("cudaStreamSynchronize", err);
  // A row with nothing to draw keeps its -1: that row's failure, not the call's.
  std::memcpy(tokens, h + out_at, n * sizeof(int32_t));
  if (logprobs != nullptr) {
    logprobs->assign(static_cast<size_t>(n), SampledLogprobs());
    const auto* results = reinterpret_cast<const RowLogprobs*>(h + lp_at);
    for (int32_t r = 0; r < n && any_logprobs; ++r) {
      if (rows[r].logprobs < 0) continue;
      const RowLogprobs& got = results[r];
      SampledLogprobs& out = (*logprobs)[r];
      out.nonfinite = got.nonfinite != 0;
      if (out.nonfinite) continue;
      out.chosen = got.chosen;
      CopyTop(got, rows[r].logprobs, &out.top_ids, &out.top_logprobs);
    }
  }
  return absl::OkStatus();
}

absl::Status CudaSampler::Score(const float* logits, int64_t vocab,
                                absl::Span<const ScoreRequest> requests,
                                std::vector<ScoredRow>* results) {
  const int32_t n = static_cast<int32_t>(requests.size());
  results->assign(requests.size(), ScoredRow());
  if (n == 0) return absl::OkStatus();
  if (logits == nullptr || vocab <= 0 || vocab > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("cuda sampler: bad logits or vocab ", vocab));
  }
  Layout layout;
  const size_t entries_at = layout.Add(n * sizeof(ScoreEntry));
  const size_t out_at = layout.Add(n * sizeof(RowLogprobs));
  absl::Status s = Reserve(layout.end());
  if (!s.ok()) return s;
  char* h = static_cast<char*>(host_);
  auto* entries = reinterpret_cast<ScoreEntry*>(h + entries_at);
  for (int32_t e = 0; e < n; ++e) {
    const ScoreRequest& q = requests[e];
    if (q.row < 0 || q.token < 0 || q.token >= vocab || q.top_n < 0 ||
        q.top_n > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat("cuda sampler: score request ", e, ": row ",
                                                     q.row, ", token ", q.token, ", top_n ",
                                                     q.top_n));
    }
    entries[e] = ScoreEntry{q.row, q.token, q.top_n};
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  cudaError_t err = cudaMemcpyAsync(device_, host_, out_at, cudaMemcpyHostToDevice, stream);
  if (err != cudaSuccess) return CudaError("upload", err);
  char* d = static_cast<char*>(device_);
  ScoringLaunchArgs a;
  a.logits = logits;
  a.vocab = vocab;
  a.count = n;
  a.entries = reinterpret_cast<const ScoreEntry*>(d + entries_at);
  a.out = reinterpret_cast<RowLogprobs*>(d + out_at);
  err = LaunchScoring(a, stream);
  if (err != cudaSuccess) return Drained(stream, CudaError("LaunchScoring", err));
  err = cudaMemcpyAsync(h + out_at, d + out_at, n * sizeof(RowLogprobs), cudaMemcpyDeviceToHost,
                        stream);
  if (err != cudaSuccess) return Drained(stream, CudaError("download", err));
  err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return CudaError("cudaStreamSynchronize", err);
  const auto* got = reinterpret_cast<const RowLogprobs*>(h + out_at);
  for (int32_t e = 0; e < n; ++e) {
    ScoredRow& out = (*results)[e];
    out.nonfinite = got[e].nonfinite != 0;
    if (out.nonfinite) continue;
    out.logprob = got[e].chosen;
    out.rank = got[e].rank;
    CopyTop(got[e], requests[e].top_n, &out.top_ids, &out.top_logprobs);
  }
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace blossom
