// Batched GPU sampling over full-vocabulary logits (250,880 entries for BLOOM).
//
// Two kernels, one block per row, after step 1's edits (logit_edits.cu):
//  1. Penalties (HF repetition penalty over prompt+output ids, each id once; OpenAI frequency and
//     presence penalties over output ids). Every distinct id is owned by the thread holding its
//     first occurrence, so no two threads write the same logit.
//  2. Selection. Greedy rows take the argmax (ties to the lowest id), found in the same pass as
//     the row's max. Other rows never sort the
//     vocabulary: top-k is a 4-pass radix select (8 bits per pass) on an order-preserving integer
//     key of the logit, giving the k-th largest value; top-p is the same radix walk over
//     probability mass, giving the smallest logit threshold whose kept mass reaches top_p;
//     typical-p walks the mass again on a key of the typicality score |E[x] - x|; min-p is a
//     threshold on x below the survivors' max. The draw is one Philox4x32-10 uniform per
//     (seed, offset), located by a block-wide scan in double over the kept weights in token-id
//     order.
// Logprobs (logprobs.cu) are scored on the raw row around these two kernels.
// Same semantics as engine/sampling (HF order: masks and bias, penalties, temperature, top-k,
// top-p, typical-p, min-p; ties at a threshold are kept). The mass histograms use shared-memory
// float atomics, so a row whose cumulative mass lands within rounding of top_p or typical_p may
// keep a slightly different set between runs. A NaN or +inf anywhere in the raw row fails the
// row (token -2), whether or not an edit masked it afterwards (the edit kernel flags those).
#include <cfloat>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sampling_launch.h"

namespace blossom {
namespace cuda {
namespace {

constexpr int kPenaltyThreads = 256;
constexpr int kSampleThreads = 1024;

__host__ __device__ inline void Philox4x32_10(uint32_t ctr[4], uint32_t key[2]) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t c0 = hi1 ^ ctr[1] ^ key[0], c2 = hi0 ^ ctr[3] ^ key[1];
    ctr[0] = c0;
    ctr[1] = lo1;
    ctr[2] = c2;
    ctr[3] = lo0;
    key[0] += 0x9E3779B9u;
    key[1] += 0xBB67AE85u;
  }
}

__host__ __device__ inline float Uniform(uint64_t seed, uint64_t offset) {
  uint32_t ctr[4] = {static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), 0u, 0u};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  Philox4x32_10(ctr, key);
  return static_cast<float>(ctr[0] >> 8) * (1.0f / 16777216.0f);  // 24 bits: exactly < 1
}

// Monotone map float -> uint32 (larger float, larger key).
// -0 is read as +0 first (f + 0.0f), since the host compares floats, where -0 == +0: a -0
// logit at a top-k or top-p boundary of +0 is kept, as there.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t b = __float_as_uint(f + 0.0f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The repetition penalty applies once per distinct token of the prompt and output. With
// `seen_words` > 0 a bitmap of the vocabulary in shared memory (31 KB for BLOOM's 250,880)
// finds each token's first occurrence in one pass: the thread whose atomicOr sets the bit
// applies it (the same value whichever thread that is). Without it (a vocabulary too large for
// shared memory) each occurrence scans the ones before it, quadratic in the context.
__global__ void PenaltyKernel(SamplingLaunchArgs a, int32_t seen_words) {
  extern __shared__ uint32_t seen[];
  const int32_t r = blockIdx.x;
  const RowSamplingParams p = a.params[r];
  float* l = a.logits + static_cast<int64_t>(r) * a.vocab;
  const int32_t* pt = a.prompt_start != nullptr ? a.prompt_tokens + a.prompt_start[r] : nullptr;
  const int32_t np = a.prompt_start != nullptr ? a.prompt_start[r + 1] - a.prompt_start[r] : 0;
  const int32_t* ot = a.output_start != nullptr ? a.output_tokens + a.output_start[r] : nullptr;
  const int32_t no = a.output_start != nullptr ? a.output_start[r + 1] - a.output_start[r] : 0;
  auto token = [&](int32_t i) { return i < np ? pt[i] : ot[i - np]; };
  if (p.repetition_penalty != 1.0f) {
    if (seen_words > 0) {
      for (int32_t w = threadIdx.x; w < seen_words; w += blockDim.x) seen[w] = 0u;
      __syncthreads();
    }
    for (int32_t i = threadIdx.x; i < np + no; i += blockDim.x) {
      const int32_t t = token(i);
      if (t < 0 || t >= a.vocab) continue;
      bool first = true;
      if (seen_words > 0) {
        const uint32_t bit = 1u << (t & 31);
        first = (atomicOr(&seen[t >> 5], bit) & bit) == 0u;
      } else {
        for (int32_t j = 0; j < i && first; ++j) first = token(j) != t;
      }
      if (!first) continue;
      const float v = l[t];
      // Dividing by a tiny penalty can overflow; the clamp keeps the row free of +inf, except a
      // +inf the model produced, which the sample kernel must see to fail the row.
      l[t] = v == INFINITY ? v
             : v > 0.0f    ? fminf(v / p.repetition_penalty, FLT_MAX)
                           : v * p.repetition_penalty;
    }
  }
  __syncthreads();  // the repetition penalty lands before the additive ones
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (int32_t i = threadIdx.x; i < no; i += blockDim.x) {
      const int32_t t = ot[i];
      if (t < 0 || t >= a.vocab) continue;
      bool first = true;
      for (int32_t j = 0; j < i && first; ++j) first = ot[j] != t;
      if (!first) continue;
      int32_t count = 0;
      for (int32_t j = 0; j < no; ++j) count += ot[j] == t;
      // Rounded as the host's separate multiply and add (nvcc would fuse them into one fma).
      l[t] -= __fadd_rn(__fmul_rn(static_cast<float>(count), p.frequency_penalty),
                        p.presence_penalty);
    }
  }
}

// Inclusive block scan in double (fixed order); `warp_sums` holds 32 doubles. Ends with a barrier.
__device__ double BlockInclusiveScan(double v, double* warp_sums, double* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < warps ? warp_sums[lane] : 0.0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    if (lane < warps) warp_sums[lane] = w;
  }
  __syncthreads();
  const double result = v + (warp > 0 ? warp_sums[warp - 1] : 0.0);
  *total = warp_sums[warps - 1];
  __syncthreads();
  return result;
}

struct MaxAndId {
  float value;
  int32_t id;
};

// Keeps the larger value, and on a tie the lower id (NaN never wins: its comparisons are false).
__device__ __forceinline__ void Consider(MaxAndId& best, float v, int32_t id) {
  if (v > best.value || (v == best.value && id < best.id)) best = {v, id};
}

// Max over l[0, V) and the lowest id holding it; every thread gets the result, and whether the
// row holds a NaN or +inf. 16-byte loads, four in flight per thread, where the row allows (one
// block reads 1 MB of logits per row at BLOOM's vocabulary: a load at a time per thread was
// latency-bound, ~150 us on an H200).
__device__ MaxAndId RowMaxAndId(const float* __restrict__ l, int64_t V, float* scratch,
                                int32_t* scratch_id, bool* nonfinite) {
  constexpr int kUnroll = 4;
  MaxAndId best = {-INFINITY, INT_MAX};
  bool bad = false;
  if (V % 4 == 0 && Aligned16(l)) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const int64_t n4 = V / 4;
    for (int64_t i0 = threadIdx.x; i0 < n4; i0 += static_cast<int64_t>(blockDim.x) * kUnroll) {
      float4 f[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = i0 + static_cast<int64_t>(u) * blockDim.x;
        f[u] = i < n4 ? __ldg(l4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t id = static_cast<int32_t>(4 * (i0 + static_cast<int64_t>(u) * blockDim.x));
        Consider(best, f[u].x, id);
        Consider(best, f[u].y, id + 1);
        Consider(best, f[u].z, id + 2);
        Consider(best, f[u].w, id + 3);
        bad |= NonFinite(f[u].x) | NonFinite(f[u].y) | NonFinite(f[u].z) | NonFinite(f[u].w);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      Consider(best, l[i], static_cast<int32_t>(i));
      bad |= NonFinite(l[i]);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    Consider(best, __shfl_xor_sync(0xffffffffu, best.value, o), __shfl_xor_sync(0xffffffffu, best.id, o));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) {
    scratch[warp] = best.value;
    scratch_id[warp] = best.id;
  }
  __syncthreads();
  best = {-INFINITY, INT_MAX};
  if (lane < warps) best = {scratch[lane], scratch_id[lane]};
  for (int o = 16; o > 0; o >>= 1) {
    Consider(best, __shfl_xor_sync(0xffffffffu, best.value, o), __shfl_xor_sync(0xffffffffu, best.id, o));
  }
  *nonfinite = __syncthreads_or(bad) != 0;  // also: scratch may be reused at once
  return best;
}

// Block-wide sum in double; every thread gets it. Ends with a barrier, as BlockSum.
__device__ double BlockSumDouble(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double r = lane < warps ? scratch[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  __syncthreads();
  return r;
}

// Typical-p's order key: larger for a smaller |E[x] - x| (more typical).
__device__ __forceinline__ uint32_t TypicalKey(float x, double mean) {
  return OrderKey(-static_cast<float>(fabs(mean - static_cast<double>(x))));
}

// The largest key threshold whose mass (over the entries with key >= it) reaches `target`, by
// a radix walk from the most significant byte: four passes over the row, each a 256-bin mass
// histogram of the entries that share the prefix found so far. `entry(i, &key, &mass)` is false
// for an entry that is not a candidate. When rounding leaves the target just out of reach, the
// lowest non-empty bin is taken (everything stays). The histogram uses shared float atomics, so
// a boundary within rounding of the target may fall differently between runs.
template <typename Entry>
__device__ uint32_t MassThreshold(int64_t V, float target, Entry entry, float* hist_f,
                                  uint32_t* sh_prefix, float* sh_mass_above) {
  if (threadIdx.x == 0) {
    *sh_prefix = 0;
    *sh_mass_above = 0.0f;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist_f[i] = 0.0f;
    __syncthreads();
    const uint32_t prefix = *sh_prefix;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      uint32_t key;
      float mass;
      if (entry(i, &key, &mass) && (key & mask) == prefix) {
        atomicAdd(&hist_f[(key >> shift) & 255u], mass);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float cum = *sh_mass_above;
      int chosen = -1, lowest_nonzero = -1;
      for (int d = 255; d >= 0; --d) {
        if (hist_f[d] > 0.0f) lowest_nonzero = d;
        if (cum + hist_f[d] >= target && hist_f[d] > 0.0f) {
          chosen = d;
          break;
        }
        cum += hist_f[d];
      }
      if (chosen < 0) {  // rounding left the target just out of reach: keep the whole range
        chosen = lowest_nonzero < 0 ? 0 : lowest_nonzero;
        cum = *sh_mass_above;
        for (int d = 255; d > chosen; --d) cum += hist_f[d];
      }
      *sh_prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
      *sh_mass_above = cum;
    }
    __syncthreads();
    mask |= 0xFFu << shift;
  }
  return *sh_prefix;
}

// One block of 1024 per SM is enough (one row per block, memory-bound): the register budget of
// 64 a thread avoids spills.
__global__ void __launch_bounds__(kSampleThreads, 1) SampleKernel(SamplingLaunchArgs a) {
  __shared__ float scratch[32];
  __shared__ double scratch_d[32];
  __shared__ uint32_t hist_u[256];
  __shared__ float hist_f[256];
  __shared__ uint32_t sh_prefix;
  __shared__ int64_t sh_remaining;
  __shared__ float sh_mass_above;
  __shared__ int32_t sh_owner, sh_last_owner;  // the draw's threads (see there)
  const int32_t r = blockIdx.x;
  const RowSamplingParams p = a.params[r];
  const float* l = a.logits + static_cast<int64_t>(r) * a.vocab;
  const int64_t V = a.vocab;

  // The row's max and the lowest id holding it (the greedy token), in one pass over the logits.
  __shared__ int32_t scratch_id[32];
  bool nonfinite = false;
  const MaxAndId best = RowMaxAndId(l, V, scratch, scratch_id, &nonfinite);
  const float mx = best.value;
  if (threadIdx.x == 0) {
    sh_owner = INT_MAX;
    sh_last_owner = -1;
  }
  __syncthreads();
  // Also a NaN or +inf that the edit kernel overwrote with a mask.
  if (a.nonfinite_rows != nullptr && a.nonfinite_rows[r] != 0) nonfinite = true;
  if (nonfinite) {  // reported as -2 (kNonFiniteRow), the row's Internal error
    if (threadIdx.x == 0) a.out_tokens[r] = -2;
    return;
  }
  if (mx == -INFINITY) {  // everything masked: reported as -1
    if (threadIdx.x == 0) a.out_tokens[r] = -1;
    return;
  }
  if (p.temperature == 0.0f) {
    if (threadIdx.x == 0) a.out_tokens[r] = best.id;
    return;
  }
  // Divided, not multiplied by 1 / t, as the CPU sampler does: a denormal temperature (1e-40
  // passes validation) makes 1 / t overflow to inf and (mx - mx) * inf a NaN weight, which
  // drew no token at all; (v - mx) / t is 0 for the maximum and -inf below it (greedy).
  const float t = p.temperature;

  // Top-k: the k-th largest key, by radix select from the most significant byte.
  uint32_t keep_min = 0;
  if (p.top_k > 0 && p.top_k < V) {
    if (threadIdx.x == 0) {
      sh_prefix = 0;
      sh_remaining = p.top_k;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) hist_u[i] = 0;
      __syncthreads();
      const uint32_t prefix = sh_prefix;
      for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        const uint32_t key = OrderKey(l[i]);
        if ((key & mask) == prefix) atomicAdd(&hist_u[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int64_t cum = 0;
        for (int d = 255; d >= 0; --d) {
          if (cum + hist_u[d] >= sh_remaining) {
            sh_prefix = prefix | (static_cast<uint32_t>(d) << shift);
            sh_remaining -= cum;
            break;
          }
          cum += hist_u[d];
        }
      }
      __syncthreads();
      mask |= 0xFFu << shift;
    }
    keep_min = sh_prefix;
  }
  // Top-p: the largest threshold whose kept mass reaches top_p of the (top-k) mass.
  if (p.top_p < 1.0f) {
    float z = 0.0f;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      z += OrderKey(l[i]) >= keep_min ? expf((l[i] - mx) / t) : 0.0f;
    }
    z = BlockSum(z, scratch);
    keep_min = max(keep_min, MassThreshold(V, p.top_p * z, [&](int64_t i, uint32_t* key, float* mass) {
      *key = OrderKey(l[i]);
      if (*key < keep_min) return false;
      *mass = expf((l[i] - mx) / t);
      return true;
    }, hist_f, &sh_prefix, &sh_mass_above));
  }

  // Typical-p (HF's TypicalLogitsWarper): over the survivors so far, keep the tokens whose
  // |-log p - H| = |E[x] - x| (x = (logit - max) / t) is no worse than that of the first token,
  // in ascending order of it, at which the mass reaches typical_p: the same radix walk on a key
  // that grows as the score falls. Scores are keyed in fp32 (the host compares doubles), so
  // tokens within rounding of the boundary score may be kept here and not there.
  const bool typical = p.typical_p < 1.0f;
  double mean = 0.0;
  uint32_t typical_min = 0;
  if (typical) {
    double z = 0.0, zx = 0.0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      if (OrderKey(l[i]) < keep_min) continue;
      const float x = (l[i] - mx) / t;
      const float w = expf(x);
      // Tokens without weight (masked: x = -inf, or underflowed) are out, as on the host: their
      // 0 * -inf would make the mean NaN and switch typical-p off for the row.
      if (w > 0.0f) {
        z += w;
        zx += static_cast<double>(w) * x;
      }
    }
    z = BlockSumDouble(z, scratch_d);
    zx = BlockSumDouble(zx, scratch_d);
    mean = zx / z;
    typical_min = MassThreshold(V, p.typical_p * static_cast<float>(z),
                                [&](int64_t i, uint32_t* key, float* mass) {
      if (OrderKey(l[i]) < keep_min) return false;
      const float x = (l[i] - mx) / t;
      *key = TypicalKey(x, mean);
      *mass = expf(x);
      return true;
    }, hist_f, &sh_prefix, &sh_mass_above);
  }
  auto kept_before_min_p = [&](float v, float x) {
    return OrderKey(v) >= keep_min && (!typical || TypicalKey(x, mean) >= typical_min);
  };

  // Min-p: p >= min_p * max p over the survivors, i.e. x >= max x + log(min_p) (the host's
  // comparison, in double).
  double min_x = -INFINITY;
  if (p.min_p > 0.0f) {
    float top = -INFINITY;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const float x = (l[i] - mx) / t;
      if (kept_before_min_p(l[i], x) && expf(x) > 0.0f) top = fmaxf(top, x);
    }
    top = BlockMax(top, scratch);
    min_x = static_cast<double>(top) + log(static_cast<double>(p.min_p));
  }
  auto weight = [&](float v) {
    const float x = (v - mx) / t;
    if (!kept_before_min_p(v, x) || static_cast<double>(x) < min_x) return 0.0f;
    return expf(x);
  };

  // Draw: contiguous chunks per thread, scanned in id order, so the result is deterministic.
  // One thread owns the target: the lowest whose inclusive prefix passes it. (Each thread
  // cannot claim its own range instead: its walk starts at inclusive - local, which rounding
  // leaves off its left neighbour's end, and a target in such a gap was claimed by no thread,
  // about once in 10^4 draws over BLOOM's vocabulary, which then fell back to the row's last
  // token.) The sums are in double: the owner's walk adds weights of ~0.02 to a running sum
  // near the row's total (~4,000 for normal(0, 1) logits at temperature 1), where fp32
  // rounding moved token boundaries so far that 2.6% of such draws took another token than the
  // exact inverse CDF of the same uniform, and about 1 in 10^4 ended the walk short on the
  // owner's last token (a CPU emulation of this kernel; in double, none of 20,000 differed). A
  // double also keeps the threads' prefixes increasing, so no thread holding only a negligible
  // weight can be the first to pass a target.
  const int64_t chunk = (V + blockDim.x - 1) / blockDim.x;
  const int64_t begin = threadIdx.x * chunk, end = min(V, begin + chunk);
  double local = 0.0;
  for (int64_t i = begin; i < end; ++i) local += weight(l[i]);
  double total = 0.0;
  const double inclusive = BlockInclusiveScan(local, scratch_d, &total);
  const double target = static_cast<double>(Uniform(p.seed, p.offset)) * total;
  if (local > 0.0) {
    if (target < inclusive) atomicMin(&sh_owner, static_cast<int32_t>(threadIdx.x));
    atomicMax(&sh_last_owner, static_cast<int32_t>(threadIdx.x));
  }
  __syncthreads();
  // No prefix passes the target (u * total rounded up to total): the last token with weight.
  const int32_t owner = sh_owner != INT_MAX ? sh_owner : sh_last_owner;
  if (owner < 0) {  // no weight at all (cannot happen: every filter keeps at least one token)
    if (threadIdx.x == 0) a.out_tokens[r] = -1;
    return;
  }
  if (static_cast<int32_t>(threadIdx.x) == owner) {
    double acc = inclusive - local;
    int32_t pick = -1;
    for (int64_t i = begin; i < end; ++i) {
      const float w = weight(l[i]);
      if (w <= 0.0f) continue;
      pick = static_cast<int32_t>(i);
      acc += w;
      if (target < acc) break;  // else rounding: the owner's last token with weight
    }
    a.out_tokens[r] = pick;
  }
}

}  // namespace

float PhiloxUniform(uint64_t seed, uint64_t offset) { return Uniform(seed, offset); }

cudaError_t LaunchSampling(const SamplingLaunchArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (a.vocab <= 0 || a.vocab > INT_MAX) return cudaErrorInvalidValue;
  // Logprobs read the raw row, so their stats come before the penalties edit it.
  cudaError_t err = LaunchLogprobStats(a, stream);
  if (err != cudaSuccess) return err;
  err = LaunchLogitEdits(a, stream);
  if (err != cudaSuccess) return err;
  if (a.any_penalty) {
    // The bitmap in shared memory where it fits the default 48 KB (a vocabulary up to 393,216).
    const int64_t words = (static_cast<int64_t>(a.vocab) + 31) / 32;
    const int32_t seen_words = words * 4 <= 48 * 1024 ? static_cast<int32_t>(words) : 0;
    PenaltyKernel<<<a.rows, kPenaltyThreads, static_cast<size_t>(seen_words) * 4, stream>>>(
        a, seen_words);
  }
  SampleKernel<<<a.rows, kSampleThreads, 0, stream>>>(a);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return LaunchChosenLogprobs(a, stream);
}

}  // namespace cuda
}  // namespace blossom
