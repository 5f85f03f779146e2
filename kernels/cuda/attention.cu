// Paged causal ALiBi attention over the backend's KV layout (see launch.h).
//
// Two paths, chosen per step on the host from max_query_len:
//  * Decode (every sequence has one new token): one block per (head, sequence, partition of
//    kPartition keys). Each thread scores whole keys (16-byte loads of one key row against q in
//    shared memory); probabilities stay in shared memory and the value sum is split over key
//    groups x head_dim so loads of V rows are coalesced. Sequences longer than one partition
//    write fp32 partials (o, max, sum) that a second kernel combines: long contexts use many SMs
//    even at batch 1 (flash-decoding). The split depends only on the context length, never on
//    the batch, so a sequence's decode result is the same in any decode batch.
//  * Prefill / mixed steps: one block per (sequence, tile of kQTile queries, head). Keys and
//    values stream through shared memory kKChunk at a time with an online (running max) softmax,
//    so each K/V tile is read once per query tile instead of once per query. With an f16/bf16
//    cache and head_dim % 16 == 0 (<= 128) these steps run on tensor cores instead
//    (attention_tc.cu; AttentionArgs::allow_tensor_cores), whose dot products are the tensor
//    cores' fp32 sums: the bit-identical scores below hold for the CUDA-core kernels.
// Scores are fp32 and computed with the CPU reference's exact operation order, without FMA
// contraction: dot = sum_e q[e]*k[e] in increasing e, score = slope*j + dot*scale. So the scores
// (which reach |slope * j| ~ 10^3 at long contexts, where one ulp is ~10^-4) match the CPU
// backend bit for bit on the same inputs, and only exp and the weighted sums differ in rounding.
//
// The two paths sum in different orders, so a decode token's output differs in the last bits
// between an all-decode step and a step that also carries a prefill chunk.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace blossom {
namespace cuda {
namespace {

constexpr int kDecodeThreads = 128;
constexpr int kPartition = 512;  // keys per decode block
constexpr int kPrefillThreads = 128;
constexpr int kQTile = 16;
constexpr int kKChunk = 32;  // == warp size: one lane per key in the online softmax

template <typename T>
__device__ __forceinline__ float DotRow(const float* q, const T* k, int32_t d, bool vec) {
  float acc = 0.0f;
  if (vec) {
    constexpr int kN = Vec<T>::kN;
    for (int32_t e = 0; e < d; e += kN) {
      float kv[kN];
      Load16(k + e, kv);
#pragma unroll
      for (int i = 0; i < kN; ++i) acc = __fadd_rn(acc, __fmul_rn(q[e + i], kv[i]));
    }
  } else {
    for (int32_t e = 0; e < d; ++e) acc = __fadd_rn(acc, __fmul_rn(q[e], ToF32<T>(k[e])));
  }
  return acc;
}

template <typename T>
__global__ void __launch_bounds__(kDecodeThreads) DecodeKernel(AttentionArgs a, float* part_o,
                                                               float* part_ml, int32_t max_parts) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float p_s[kPartition];
  __shared__ float red[kDecodeThreads];
  __shared__ float scratch[32];
  const int32_t h = blockIdx.x, s = blockIdx.y, p = blockIdx.z;
  const int32_t heads = a.kv.num_heads, d = a.kv.head_dim;
  const SeqInfo si = LoadSeq(a, s);
  if (!si.ok || si.num_new != 1) {
    if (threadIdx.x == 0 && h == 0 && p == 0) atomicOr(a.error_flag, kErrorBadMetadata);
    return;
  }
  const int32_t nparts = (si.ctx + kPartition - 1) / kPartition;
  if (nparts > max_parts) {  // context longer than the step's max_context_len
    if (threadIdx.x == 0 && h == 0 && p == 0) atomicOr(a.error_flag, kErrorBadMetadata);
    return;
  }
  if (p >= nparts) return;
  const int32_t t = si.first_token;
  const int32_t k_begin = p * kPartition, k_end = min(si.ctx, k_begin + kPartition);
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const T* q = static_cast<const T*>(a.q) + (static_cast<int64_t>(t) * heads + h) * d;
  for (int32_t e = threadIdx.x; e < d; e += blockDim.x) q_s[e] = ToF32<T>(q[e]);
  __syncthreads();

  const T* k_base = static_cast<const T*>(a.kv.base) + a.layer * a.kv.LayerStride();
  const T* v_base = k_base + a.kv.TensorElems();
  const bool vec = (d % Vec<T>::kN) == 0 && Aligned16(a.kv.base);
  const float slope = a.slopes[h];
  float mx = -INFINITY;
  for (int32_t j = k_begin + threadIdx.x; j < k_end; j += blockDim.x) {
    const int64_t row = KvRow(a, table, j, h);
    float score;
    if (row < 0) {
      atomicOr(a.error_flag, kErrorBadMetadata);
      score = -INFINITY;
    } else {
      score = Score(DotRow<T>(q_s, k_base + row, d, vec), a.scale, slope, j);
    }
    p_s[j - k_begin] = score;
    mx = fmaxf(mx, score);
  }
  mx = BlockMax(mx, scratch);
  float sum = 0.0f;
  for (int32_t j = k_begin + threadIdx.x; j < k_end; j += blockDim.x) {
    const float e = p_s[j - k_begin] == -INFINITY ? 0.0f : expf(p_s[j - k_begin] - mx);
    p_s[j - k_begin] = e;
    sum += e;
  }
  sum = BlockSum(sum, scratch);  // ends with a barrier: p_s is complete

  const bool single = nparts == 1;
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(t) * heads * d + static_cast<int64_t>(h) * d;
  const int64_t part = (static_cast<int64_t>(t) * heads + h) * max_parts + p;
  const float inv = 1.0f / sum;
  if (d <= static_cast<int32_t>(blockDim.x)) {
    // Key groups x head_dim: a warp reads consecutive elements of one V row.
    const int32_t groups = blockDim.x / d;
    const int32_t g = threadIdx.x / d, e = threadIdx.x % d;
    float acc = 0.0f;
    if (g < groups) {
      for (int32_t j = k_begin + g; j < k_end; j += groups) {
        const float w = p_s[j - k_begin];
        if (w == 0.0f) continue;
        const int64_t row = KvRow(a, table, j, h);
        acc += w * ToF32<T>(v_base[row + e]);
      }
      red[threadIdx.x] = acc;
    }
    __syncthreads();
    if (threadIdx.x < d) {
      float o = 0.0f;
      for (int32_t gg = 0; gg < groups; ++gg) o += red[gg * d + threadIdx.x];
      if (single) {
        out[threadIdx.x] = FromF32<T>(o * inv);
      } else {
        part_o[part * d + threadIdx.x] = o;
      }
    }
  } else {
    for (int32_t e = threadIdx.x; e < d; e += blockDim.x) {
      float o = 0.0f;
      for (int32_t j = k_begin; j < k_end; ++j) {
        const float w = p_s[j - k_begin];
        if (w == 0.0f) continue;
        o += w * ToF32<T>(v_base[KvRow(a, table, j, h) + e]);
      }
      if (single) {
        out[e] = FromF32<T>(o * inv);
      } else {
        part_o[part * d + e] = o;
      }
    }
  }
  if (!single && threadIdx.x == 0) {
    part_ml[part * 2] = mx;
    part_ml[part * 2 + 1] = sum;
  }
}

template <typename T>
__global__ void DecodeReduceKernel(AttentionArgs a, const float* part_o, const float* part_ml,
                                   int32_t max_parts) {
  const int32_t h = blockIdx.x, s = blockIdx.y;
  const int32_t heads = a.kv.num_heads, d = a.kv.head_dim;
  const SeqInfo si = LoadSeq(a, s);
  if (!si.ok || si.num_new != 1) return;
  const int32_t nparts = (si.ctx + kPartition - 1) / kPartition;
  if (nparts <= 1 || nparts > max_parts) return;  // written by DecodeKernel / flagged there
  const int32_t t = si.first_token;
  const int64_t base = (static_cast<int64_t>(t) * heads + h) * max_parts;
  float m = -INFINITY;
  for (int32_t p = 0; p < nparts; ++p) m = fmaxf(m, part_ml[(base + p) * 2]);
  float l = 0.0f;
  for (int32_t p = 0; p < nparts; ++p)
    l += expf(part_ml[(base + p) * 2] - m) * part_ml[(base + p) * 2 + 1];
  const float inv = 1.0f / l;
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(t) * heads * d + static_cast<int64_t>(h) * d;
  for (int32_t e = threadIdx.x; e < d; e += blockDim.x) {
    float o = 0.0f;
    for (int32_t p = 0; p < nparts; ++p)
      o += expf(part_ml[(base + p) * 2] - m) * part_o[(base + p) * d + e];
    out[e] = FromF32<T>(o * inv);
  }
}

// Dynamic shared memory of the prefill kernel, in floats.
__host__ __device__ inline int64_t PrefillSmemFloats(int32_t d) {
  return static_cast<int64_t>(kQTile) * d      // q tile
         + static_cast<int64_t>(kKChunk) * (d + 1)  // K chunk, padded against bank conflicts
         + static_cast<int64_t>(kKChunk) * d        // V chunk
         + kQTile * kKChunk                         // probabilities
         + static_cast<int64_t>(kQTile) * d         // output accumulators
         + 3 * kQTile;                              // running max, sum, rescale
}

// The grid is an upper bound on the tile count (num_tokens / kQTile + num_seqs), so a step that
// mixes one long prompt with many decode tokens launches only as many blocks as it has tiles
// (plus a few), instead of num_seqs x (longest prompt / kQTile).
template <typename T>
__global__ void __launch_bounds__(kPrefillThreads) PrefillKernel(AttentionArgs a, const int32_t* tile_start) {
  extern __shared__ float smem[];
  const int32_t heads = a.kv.num_heads, d = a.kv.head_dim;
  const int32_t h = blockIdx.y;
  PrefillTile tile;
  if (!FindPrefillTile<kQTile>(a, tile_start, blockIdx.x, h, &tile)) return;
  const int32_t nq = tile.nq, pos0 = tile.pos0, kv_end = tile.kv_end;
  const int32_t* table = tile.table;
  const T* k_base = static_cast<const T*>(a.kv.base) + a.layer * a.kv.LayerStride();
  const T* v_base = k_base + a.kv.TensorElems();
  const float slope = a.slopes[h];

  float* q_s = smem;
  float* k_s = q_s + kQTile * d;
  float* v_s = k_s + kKChunk * (d + 1);
  float* p_s = v_s + kKChunk * d;
  float* o_s = p_s + kQTile * kKChunk;
  float* m_s = o_s + kQTile * d;
  float* l_s = m_s + kQTile;
  float* alpha_s = l_s + kQTile;

  const int64_t t0 = tile.t0;
  for (int32_t i = threadIdx.x; i < kQTile * d; i += blockDim.x) {
    const int32_t qi = i / d, e = i % d;
    q_s[i] = qi < nq ? ToF32<T>(static_cast<const T*>(a.q)[((t0 + qi) * heads + h) * d + e]) : 0.0f;
    o_s[i] = 0.0f;
  }
  if (threadIdx.x < kQTile) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int32_t j0 = 0; j0 < kv_end; j0 += kKChunk) {
    __syncthreads();  // previous chunk fully consumed
    for (int32_t i = threadIdx.x; i < kKChunk * d; i += blockDim.x) {
      const int32_t kk = i / d, e = i % d, j = j0 + kk;
      float kv = 0.0f, vv = 0.0f;
      if (j < kv_end) {
        const int64_t row = KvRow(a, table, j, h);
        if (row >= 0) {
          kv = ToF32<T>(k_base[row + e]);
          vv = ToF32<T>(v_base[row + e]);
        } else if (e == 0) {
          atomicOr(a.error_flag, kErrorBadMetadata);
        }
      }
      k_s[kk * (d + 1) + e] = kv;
      v_s[kk * d + e] = vv;
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < kQTile * kKChunk; i += blockDim.x) {
      const int32_t qi = i / kKChunk, kk = i % kKChunk, j = j0 + kk;
      float score = -INFINITY;
      if (qi < nq && j <= pos0 + qi) {
        const float* qr = q_s + qi * d;
        const float* kr = k_s + kk * (d + 1);
        float acc = 0.0f;
        for (int32_t e = 0; e < d; ++e) acc = __fadd_rn(acc, __fmul_rn(qr[e], kr[e]));
        score = Score(acc, a.scale, slope, j);
      }
      p_s[i] = score;
    }
    __syncthreads();
    for (int32_t qi = warp; qi < kQTile; qi += warps) {
      const float v = p_s[qi * kKChunk + lane];
      const float m_old = m_s[qi];
      const float m_new = fmaxf(m_old, WarpMax(v));
      float p = 0.0f, alpha = 1.0f;
      if (m_new != -INFINITY) {
        p = v == -INFINITY ? 0.0f : expf(v - m_new);
        alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
      }
      const float psum = WarpSum(p);
      p_s[qi * kKChunk + lane] = p;
      // Every lane read m_s[qi] above; the shuffles order execution but not shared-memory
      // accesses, so without this barrier lane 0's store may overtake another lane's load.
      __syncwarp();
      if (lane == 0) {
        m_s[qi] = m_new;
        l_s[qi] = l_s[qi] * alpha + psum;
        alpha_s[qi] = alpha;
      }
      __syncwarp();
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < kQTile * d; i += blockDim.x) {
      const int32_t qi = i / d, e = i % d;
      const float* pr = p_s + qi * kKChunk;
      float o = o_s[i] * alpha_s[qi];
#pragma unroll 8
      for (int32_t kk = 0; kk < kKChunk; ++kk) o += pr[kk] * v_s[kk * d + e];
      o_s[i] = o;
    }
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out);
  for (int32_t i = threadIdx.x; i < nq * d; i += blockDim.x) {
    const int32_t qi = i / d, e = i % d;
    out[((t0 + qi) * heads + h) * d + e] = FromF32<T>(o_s[i] / l_s[qi]);
  }
}

int32_t MaxParts(const AttentionArgs& a) {
  return std::max<int32_t>(1, (a.max_context_len + kPartition - 1) / kPartition);
}

bool UseDecode(const AttentionArgs& a) { return a.max_query_len == 1; }

}  // namespace

size_t AttentionWorkspaceBytes(const AttentionArgs& a) {
  if (!UseDecode(a)) return (static_cast<size_t>(a.num_seqs) + 1) * sizeof(int32_t);  // tile_start
  if (MaxParts(a) <= 1) return 0;
  const size_t rows = static_cast<size_t>(a.num_tokens) * a.kv.num_heads * MaxParts(a);
  return rows * (static_cast<size_t>(a.kv.head_dim) + 2) * sizeof(float);
}

cudaError_t LaunchAttention(const AttentionArgs& a, void* workspace, cudaStream_t stream) {
  if (a.num_tokens == 0 || a.num_seqs == 0) return cudaSuccess;
  if (a.kv.head_dim <= 0 || a.kv.head_dim > kMaxHeadDim) return cudaErrorInvalidValue;
  if (UseDecode(a)) {
    const int32_t parts = MaxParts(a);
    float* part_o = static_cast<float*>(workspace);
    float* part_ml =
        parts > 1 ? part_o + static_cast<size_t>(a.num_tokens) * a.kv.num_heads * parts * a.kv.head_dim
                  : nullptr;
    if (parts > 1 && workspace == nullptr) return cudaErrorInvalidValue;
    const dim3 grid(a.kv.num_heads, a.num_seqs, parts);
    BLOSSOM_DISPATCH_ELEM(a.kv.dtype, T,
                          DecodeKernel<T><<<grid, kDecodeThreads, 0, stream>>>(a, part_o, part_ml,
                                                                               parts));
    if (parts > 1) {
      BLOSSOM_DISPATCH_ELEM(a.kv.dtype, T,
                            DecodeReduceKernel<T><<<dim3(a.kv.num_heads, a.num_seqs), 128, 0,
                                                    stream>>>(a, part_o, part_ml, parts));
    }
    return cudaGetLastError();
  }
  if (workspace == nullptr) return cudaErrorInvalidValue;
  int32_t* tile_start = static_cast<int32_t*>(workspace);
  if (PrefillOnTensorCores(a)) return LaunchPrefillOnTensorCores(a, tile_start, stream);
  TileStartKernel<kQTile><<<1, 1024, 0, stream>>>(a.query_start, a.num_seqs, tile_start);
  const int64_t blocks = (static_cast<int64_t>(a.num_tokens) + kQTile - 1) / kQTile + a.num_seqs;
  if (blocks > 0x7fffffff || a.kv.num_heads > 65535) return cudaErrorInvalidConfiguration;
  const size_t smem = PrefillSmemFloats(a.kv.head_dim) * sizeof(float);
  cudaError_t err = cudaSuccess;
  BLOSSOM_DISPATCH_ELEM(a.kv.dtype, T, {
    // Above 48 KB a kernel must opt in; the attribute is per function, cheap to set again.
    if (smem > 48 * 1024) {
      err = cudaFuncSetAttribute(PrefillKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem));
    }
    if (err == cudaSuccess) {
      PrefillKernel<T><<<dim3(static_cast<unsigned>(blocks), a.kv.num_heads), kPrefillThreads,
                         smem, stream>>>(a, tile_start);
    }
  });
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace blossom
