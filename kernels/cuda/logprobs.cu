// Raw logprobs on the device, so that a request asking for logprobs is sampled where its logits
// are and only ~200 bytes per row come back, instead of the whole 1 MB row (BLOOM's 250,880
// logits) copied to the host and scored there.
//
// Semantics are the host sampler's (engine/sampling/sampler.cc, Logprobs): the log-softmax of the
// RAW row, before penalties; the top n by raw logit, descending, ties to the lowest id, leaving
// out -inf logits; each value max(v - max - log(sum), -FLT_MAX) in double. Sums differ from the
// host's only in order (each weight is fp32 expf as on the host, accumulated in double), so values
// agree to ~1e-6 and ids exactly. Unlike the host, a NaN or +inf is flagged rather than refused.
//
// Two kernels for sampled rows, one block per logprob row (rows without logprobs return at once),
// and a third that scores prompt rows against known tokens (ScanRawRow with the token: also its
// rank, counted in the same pass):
//  1. Stats, launched before the edit and penalty kernels: one pass over the row keeps, per
//     thread, an online (max, sum of exp) and a sorted list of its n best (value, id); the block then merges
//     the sums and takes the n best heads in n rounds of a block argmax. (Every entry of the row's
//     top n is in its own thread's top n, so the merge is exact.) The row also keeps the raw
//     logits of its biased tokens and, with penalties, of its history tokens, which the edit and
//     penalty kernels are about to overwrite.
//  2. Chosen, after the draw: the drawn token's raw logit (from that scratch when the token is
//     biased or in the penalised history, else from the row, which nothing else wrote) against
//     the stats.
// Cost: one extra read of each logprob row (~1 MB, tens of microseconds on one SM); the merge's n
// rounds are two block barriers each.
#include <cfloat>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sampling_launch.h"

namespace blossom {
namespace cuda {
namespace {

constexpr int kStatsThreads = 512;
constexpr int kChosenThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ bool Better(float av, int32_t aid, float bv, int32_t bid) {
  return av > bv || (av == bv && aid < bid);
}

// The warp's best (value, id) in every lane; "none" is (-inf, INT_MAX), worse than any entry.
__device__ __forceinline__ void WarpBest(float& v, int32_t& id) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int32_t oid = __shfl_xor_sync(kFullMask, id, o);
    if (Better(ov, oid, v, id)) {
      v = ov;
      id = oid;
    }
  }
}

// Merges an online (max, sum of exp(v - max)) pair into another. Symmetric in its operands
// (IEEE + and * commute), so both lanes of a butterfly step agree.
__device__ __forceinline__ void MergeMaxSum(float& m, double& s, float om, double os) {
  const float top = fmaxf(m, om);
  if (top == -INFINITY) return;  // both empty
  const double mine = m == -INFINITY ? 0.0 : s * exp(static_cast<double>(m) - top);
  const double theirs = om == -INFINITY ? 0.0 : os * exp(static_cast<double>(om) - top);
  s = mine + theirs;
  m = top;
}

__device__ __forceinline__ void WarpMaxSum(float& m, double& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(kFullMask, m, o);
    const double os = __shfl_xor_sync(kFullMask, s, o);
    MergeMaxSum(m, s, om, os);
  }
}

__device__ __forceinline__ float RawLogprob(float v, float max_logit, double log_sum) {
  const double value = static_cast<double>(v) - static_cast<double>(max_logit) - log_sum;
  return static_cast<float>(fmax(value, -static_cast<double>(FLT_MAX)));
}

__device__ __forceinline__ bool Penalised(const RowSamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
         p.presence_penalty != 0.0f;
}

// The raw log-softmax statistics of row `l` into *out (max, log_sum, nonfinite, the top n); with
// `token` >= 0 also the token's logprob (out->chosen) and its rank (out->rank: the entries whose
// logit is >= its own, itself included; sampler.h's RawLogprobs). Called by a whole block.
__device__ void ScanRawRow(const float* l, int64_t vocab, int32_t n, int32_t token,
                           RowLogprobs* out) {
  // One pass: online max and sum, and this thread's n best, sorted (ids rise within a thread, so
  // an equal value arriving later is worse and goes after).
  const float given = token >= 0 ? l[token] : NAN;  // NaN: every comparison false, no rank
  int32_t at_least = 0;
  float m = -INFINITY;
  double s = 0.0;
  bool bad = false;
  float best_v[kRowTopLogprobs];
  int32_t best_id[kRowTopLogprobs];
  int32_t kept = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = l[i];
    at_least += v >= given ? 1 : 0;
    if (NonFinite(v)) {
      bad = true;
      continue;
    }
    if (v == -INFINITY) continue;
    if (v > m) {
      // In double: a row whose maximum keeps rising rescales often (m = -inf at first: 0 * 0 + 1).
      s = s * exp(static_cast<double>(m) - static_cast<double>(v)) + 1.0;
      m = v;
    } else {
      s += static_cast<double>(expf(v - m));
    }
    if (n > 0 && (kept < n || v > best_v[kept - 1])) {
      int32_t at = kept < n ? kept++ : n - 1;
      while (at > 0 && best_v[at - 1] < v) {
        best_v[at] = best_v[at - 1];
        best_id[at] = best_id[at - 1];
        --at;
      }
      best_v[at] = v;
      best_id[at] = static_cast<int32_t>(i);
    }
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __shared__ float warp_m[32];
  __shared__ double warp_s[32];
  __shared__ float warp_v[32];
  __shared__ int32_t warp_id[32];
  __shared__ float top_v[kRowTopLogprobs];
  __shared__ int32_t top_id[kRowTopLogprobs];
  __shared__ int32_t warp_count[32];

  WarpMaxSum(m, s);
  int32_t rank = at_least;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) rank += __shfl_xor_sync(kFullMask, rank, o);
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
    warp_count[warp] = rank;
  }
  bad = __syncthreads_or(bad) != 0;  // also orders the writes above before the reads below
  if (warp == 0) {
    m = lane < warps ? warp_m[lane] : -INFINITY;
    s = lane < warps ? warp_s[lane] : 0.0;
    WarpMaxSum(m, s);  // thread 0 now holds the row's max and sum, and below its rank count
    rank = lane < warps ? warp_count[lane] : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) rank += __shfl_xor_sync(kFullMask, rank, o);
  }

  // n rounds of a block argmax over each thread's next unused entry.
  int32_t head = 0, count = 0;
  for (int32_t k = 0; k < n; ++k) {
    float v = head < kept ? best_v[head] : -INFINITY;
    int32_t id = head < kept ? best_id[head] : INT_MAX;
    WarpBest(v, id);
    if (lane == 0) {
      warp_v[warp] = v;
      warp_id[warp] = id;
    }
    __syncthreads();
    if (warp == 0) {
      v = lane < warps ? warp_v[lane] : -INFINITY;
      id = lane < warps ? warp_id[lane] : INT_MAX;
      WarpBest(v, id);
      if (lane == 0) {
        top_v[k] = v;
        top_id[k] = id;
      }
    }
    __syncthreads();
    const int32_t winner = top_id[k];
    if (winner == INT_MAX) break;  // fewer finite logits than n (the same for every thread)
    if (head < kept && best_id[head] == winner) ++head;  // ids are unique to one thread
    count = k + 1;
  }

  if (threadIdx.x == 0) {
    const double log_sum = log(s);
    out->max_logit = m;
    out->log_sum = log_sum;
    out->chosen = token >= 0 ? RawLogprob(given, m, log_sum) : 0.0f;
    out->rank = rank;
    out->nonfinite = bad ? 1 : 0;
    out->count = count;
    for (int32_t k = 0; k < count; ++k) {
      out->top_ids[k] = top_id[k];
      out->top_logprobs[k] = RawLogprob(top_v[k], m, log_sum);
    }
  }
}


__global__ void __launch_bounds__(kStatsThreads) LogprobStatsKernel(SamplingLaunchArgs a) {
  const int32_t r = blockIdx.x;
  const RowSamplingParams p = a.params[r];
  if (p.logprobs < 0) return;  // the whole block
  const int32_t n = min(p.logprobs, kRowTopLogprobs);
  const float* l = a.logits + static_cast<int64_t>(r) * a.vocab;

  // Keep the raw logits the edit and penalty kernels (launched next on the stream) overwrite.
  if (a.bias_start != nullptr) {
    for (int32_t i = a.bias_start[r] + threadIdx.x; i < a.bias_start[r + 1]; i += blockDim.x) {
      a.raw_bias[i] = l[a.bias[i].token];
    }
  }
  if (Penalised(p)) {
    if (a.prompt_start != nullptr) {
      const int32_t end = a.prompt_start[r + 1];
      for (int32_t i = a.prompt_start[r] + threadIdx.x; i < end; i += blockDim.x) {
        a.raw_prompt[i] = l[a.prompt_tokens[i]];
      }
    }
    if (a.output_start != nullptr) {
      const int32_t end = a.output_start[r + 1];
      for (int32_t i = a.output_start[r] + threadIdx.x; i < end; i += blockDim.x) {
        a.raw_output[i] = l[a.output_tokens[i]];
      }
    }
  }

  ScanRawRow(l, a.vocab, n, /*token=*/-1, &a.out_logprobs[r]);
}

__global__ void __launch_bounds__(kChosenThreads) ChosenLogprobKernel(SamplingLaunchArgs a) {
  const int32_t r = blockIdx.x;
  const RowSamplingParams p = a.params[r];
  if (p.logprobs < 0) return;
  const int32_t token = a.out_tokens[r];
  if (token < 0 || token >= a.vocab) return;  // kNoToken: the row fails, its logprob is unused
  // The first history position holding the token, when the row is penalised (only then was its
  // history uploaded and its logits edited): prompt positions first, then output ones; else its
  // position among the row's biases. (A masked or banned token is -inf: never drawn.)
  __shared__ int32_t where, where_bias;
  if (threadIdx.x == 0) {
    where = INT_MAX;
    where_bias = INT_MAX;
  }
  __syncthreads();
  if (a.bias_start != nullptr) {
    for (int32_t i = a.bias_start[r] + threadIdx.x; i < a.bias_start[r + 1]; i += blockDim.x) {
      if (a.bias[i].token == token) atomicMin(&where_bias, i);
    }
  }
  const int32_t np = a.prompt_start != nullptr ? a.prompt_start[r + 1] - a.prompt_start[r] : 0;
  const int32_t no = a.output_start != nullptr ? a.output_start[r + 1] - a.output_start[r] : 0;
  if (Penalised(p)) {
    for (int32_t i = threadIdx.x; i < np + no; i += blockDim.x) {
      const int32_t t = i < np ? a.prompt_tokens[a.prompt_start[r] + i]
                               : a.output_tokens[a.output_start[r] + i - np];
      if (t == token) atomicMin(&where, i);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    RowLogprobs& out = a.out_logprobs[r];
    float raw;
    if (where == INT_MAX && where_bias != INT_MAX) {
      raw = a.raw_bias[where_bias];
    } else if (where == INT_MAX) {
      raw = a.logits[static_cast<int64_t>(r) * a.vocab + token];
    } else if (where < np) {
      raw = a.raw_prompt[a.prompt_start[r] + where];
    } else {
      raw = a.raw_output[a.output_start[r] + where - np];
    }
    out.chosen = RawLogprob(raw, out.max_logit, out.log_sum);
  }
}

// Prompt logprobs: each entry scores row entries[e].row against its known token.
__global__ void __launch_bounds__(kStatsThreads) ScoreKernel(ScoringLaunchArgs a) {
  const ScoreEntry entry = a.entries[blockIdx.x];
  ScanRawRow(a.logits + entry.row * a.vocab, a.vocab, min(entry.top_n, kRowTopLogprobs),
             entry.token, &a.out[blockIdx.x]);
}

}  // namespace

cudaError_t LaunchScoring(const ScoringLaunchArgs& a, cudaStream_t stream) {
  if (a.count == 0) return cudaSuccess;
  ScoreKernel<<<a.count, kStatsThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchLogprobStats(const SamplingLaunchArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.out_logprobs == nullptr) return cudaSuccess;
  LogprobStatsKernel<<<a.rows, kStatsThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchChosenLogprobs(const SamplingLaunchArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.out_logprobs == nullptr) return cudaSuccess;
  ChosenLogprobKernel<<<a.rows, kChosenThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace blossom
