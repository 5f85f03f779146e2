// Paged causal ALiBi attention over the backend's KV layout (see launch.h).
//
// Two paths, chosen per step on the host from max_query_len:
//  * Decode (every sequence has one new token): one block per (head, sequence, partition of
//    kPartition keys). A group of lanes shares each key (16 lanes for a bf16 row of 128: one
//    16-byte piece each, so a warp's loads are coalesced) for its score and again for its
//    weighted V row; probabilities stay in shared memory, and the groups' and warps' partial
//    sums meet through shuffles and shared memory (DecodePartitionVec; rows that are not whole
//    16-byte vectors take a per-thread path, DecodePartitionScalar). Sequences longer than one
//    partition write fp32 partials (o, max, sum) that a second kernel combines: long contexts
//    use many SMs even at batch 1 (flash-decoding). The split depends only on the context length, never on
//    the batch, so a sequence's decode result is the same in any decode batch.
//  * Prefill / mixed steps: one block per (sequence, tile of kQTile queries, head). Keys and
//    values stream through shared memory kKChunk at a time with an online (running max) softmax,
//    so each K/V tile is read once per query tile instead of once per query. With an f16/bf16
//    cache and head_dim % 16 == 0 (<= 128) these steps run on tensor cores instead
//    (attention_tc.cu; AttentionArgs::allow_tensor_cores), whose dot products are the tensor
//    cores' fp32 sums.
// Scores are fp32: score = slope*j + dot*scale without FMA contraction (HF's order of the two
// terms); the CUDA-core prefill sums the dot in increasing e, decode in lane-strided pieces, the
// CPU backend in SIMD lanes. So the dots differ in the last bits, and a score (which reaches
// |slope * j| ~ 10^3 at long contexts, where one fp32 ulp is ~10^-4) can round one ulp apart:
// the parity tests allow for that (AlibiScoreAtol in cuda_backend_test_util.h), measured at 1e-5
// on outputs of ~0.1.
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

constexpr int kDecodeMaxThreads = 512;  // AttentionArgs::decode_threads: 128, 256 or 512
// Keys per decode block. 256: a 2,048-token context is 8 blocks per head (at 512, a batch-1
// decode step's attention at that context ran 100 us per layer on an H200, latency-bound with 160
// blocks on 132 SMs), and the partials cost 2 * 130 floats per (token, head, partition).
constexpr int kPartition = 256;
constexpr int32_t kMaxGridYZ = 65535;  // CUDA's limit on gridDim.y and gridDim.z
constexpr int kKeyUnroll = 4;    // keys a lane group works on at once in the decode kernel
constexpr int kPrefillThreads = 128;
constexpr int kQTile = 16;
constexpr int kKChunk = 32;  // == warp size: one lane per key in the online softmax

template <typename T>
__device__ __forceinline__ float DotRow(const float* q, const T* k, int32_t d) {
  float acc = 0.0f;
  for (int32_t e = 0; e < d; ++e) acc = __fadd_rn(acc, __fmul_rn(q[e], ToF32<T>(k[e])));
  return acc;
}

// The partition's scores in p_s[0, n) become their unnormalised softmax weights exp(score - max)
// (0 for masked keys); *mx goes in as this thread's running max and comes out as the block's.
// Returns the weights' block-wide sum. Ends with a barrier: every weight is in p_s.
__device__ __forceinline__ float ExpWeights(float* p_s, int32_t n, float* mx, float* scratch) {
  *mx = BlockMax(*mx, scratch);  // ends with a barrier: every score is in p_s
  float sum = 0.0f;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = p_s[i] == -INFINITY ? 0.0f : expf(p_s[i] - *mx);
    p_s[i] = e;
    sum += e;
  }
  return BlockSum(sum, scratch);
}

// A decode partition's window of the sequence's block table, copied to shared memory once: each
// key's row then costs no global load before its K/V load.
struct BlockWindow {
  const int32_t* blocks;  // shared memory: table[first, first + count)
  int32_t first;
  __device__ __forceinline__ int64_t Row(const AttentionArgs& a, int32_t j, int32_t h) const {
    return KvRowAt(a, blocks[j / a.kv.block_size - first], j, h);
  }
};

__device__ __forceinline__ int32_t LanesPerKey(int32_t row_vecs) {
  int32_t g = 1;
  while (g < row_vecs && g < 32) g *= 2;
  return g;
}

// Decode, the common case: K/V rows of whole 16-byte vectors (head_dim % Vec<T>::kN == 0, an
// aligned pool). A group of LanesPerKey lanes (16 for bf16 at head_dim 128) shares one key: each
// lane loads 16-byte pieces of the row, so a warp reads 32 consecutive vectors (coalesced), and
// the group's partial dots meet in a shuffle reduction. The value sum is split the same way:
// each group accumulates its keys' weighted V pieces in registers, then groups and warps add up
// through shuffles and shared memory. No thread walks a partition's keys alone.
template <typename T>
__device__ __forceinline__ void DecodePartitionVec(const AttentionArgs& a, const BlockWindow& table, int32_t h,
                                                   int32_t k_begin, int32_t k_end, const float* q_s, float* p_s,
                                                   float (*red_v)[kMaxHeadDim], float* scratch, float* o_s,
                                                   float* mx_out, float* sum_out) {
  constexpr int kN = Vec<T>::kN;
  constexpr int kMaxLaneVecs = (kMaxHeadDim / kN + 31) / 32;
  const int32_t d = a.kv.head_dim, row_vecs = d / kN;
  const int32_t group = LanesPerKey(row_vecs), groups_per_warp = 32 / group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int32_t gl = lane % group;
  const int32_t slot = warp * groups_per_warp + lane / group, slots = warps * groups_per_warp;
  const T* k_base = static_cast<const T*>(a.kv.base) + a.layer * a.kv.LayerStride();
  const T* v_base = k_base + a.kv.TensorElems();
  const float slope = a.slopes[h];

  // kKeyUnroll keys per group per pass: their block-table and row loads are all in flight
  // before the first reduction waits for them.
  float mx = -INFINITY;
  for (int32_t j0 = k_begin; j0 < k_end; j0 += slots * kKeyUnroll) {  // same trip count in every lane
    int64_t row[kKeyUnroll];
    float dot[kKeyUnroll];
#pragma unroll
    for (int r = 0; r < kKeyUnroll; ++r) {
      const int32_t j = j0 + slot + r * slots;
      row[r] = j < k_end ? table.Row(a, j, h) : -1;
      dot[r] = 0.0f;
    }
    for (int32_t v = gl; v < row_vecs; v += group) {
#pragma unroll
      for (int r = 0; r < kKeyUnroll; ++r) {
        if (row[r] >= 0) {
          float kv[kN];
          Load16(k_base + row[r] + v * kN, kv);
#pragma unroll
          for (int i = 0; i < kN; ++i) dot[r] = fmaf(q_s[v * kN + i], kv[i], dot[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kKeyUnroll; ++r) {
      for (int o = group / 2; o > 0; o >>= 1) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
      const int32_t j = j0 + slot + r * slots;
      if (gl == 0 && j < k_end) {
        float score = -INFINITY;
        if (row[r] < 0) {
          atomicOr(a.error_flag, kErrorBadMetadata);
        } else {
          score = Score(dot[r], a.scale, slope, j);
        }
        p_s[j - k_begin] = score;
        mx = fmaxf(mx, score);
      }
    }
  }
  const float sum = ExpWeights(p_s, k_end - k_begin, &mx, scratch);

  float acc[kMaxLaneVecs][kN];
#pragma unroll
  for (int u = 0; u < kMaxLaneVecs; ++u)
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[u][i] = 0.0f;
  for (int32_t j0 = k_begin + slot; j0 < k_end; j0 += slots * kKeyUnroll) {
    float w[kKeyUnroll];
    int64_t row[kKeyUnroll];
#pragma unroll
    for (int r = 0; r < kKeyUnroll; ++r) {
      const int32_t j = j0 + r * slots;
      w[r] = j < k_end ? p_s[j - k_begin] : 0.0f;
      // A zero weight is masked or a bad block (its score was -inf): its row is never read.
      row[r] = w[r] != 0.0f ? table.Row(a, j, h) : -1;
    }
#pragma unroll
    for (int r = 0; r < kKeyUnroll; ++r) {
#pragma unroll
      for (int u = 0; u < kMaxLaneVecs; ++u) {
        const int32_t v = gl + u * group;
        if (row[r] >= 0 && v < row_vecs) {
          float vv[kN];
          Load16(v_base + row[r] + v * kN, vv);
#pragma unroll
          for (int i = 0; i < kN; ++i) acc[u][i] = fmaf(w[r], vv[i], acc[u][i]);
        }
      }
    }
  }
  // Groups of a warp hold the same vector slots for different keys: fold them onto group 0.
  for (int o = 16; o >= group; o >>= 1) {
#pragma unroll
    for (int u = 0; u < kMaxLaneVecs; ++u)
#pragma unroll
      for (int i = 0; i < kN; ++i) acc[u][i] += __shfl_xor_sync(0xffffffffu, acc[u][i], o);
  }
  if (lane < group) {
#pragma unroll
    for (int u = 0; u < kMaxLaneVecs; ++u) {
      const int32_t v = gl + u * group;
      if (v < row_vecs) {
#pragma unroll
        for (int i = 0; i < kN; ++i) red_v[warp][v * kN + i] = acc[u][i];
      }
    }
  }
  __syncthreads();
  for (int32_t e = threadIdx.x; e < d; e += blockDim.x) {
    float o = 0.0f;
    for (int32_t w = 0; w < warps; ++w) o += red_v[w][e];
    o_s[e] = o;
  }
  *mx_out = mx;
  *sum_out = sum;
}

// Decode for rows that are not whole 16-byte vectors (odd head sizes, a misaligned pool): each
// thread scores whole keys, the value sum is split over key groups x head_dim.
template <typename T>
__device__ __forceinline__ void DecodePartitionScalar(const AttentionArgs& a, const BlockWindow& table, int32_t h,
                                                      int32_t k_begin, int32_t k_end, const float* q_s, float* p_s,
                                                      float* red, float* scratch, float* o_s, float* mx_out,
                                                      float* sum_out) {
  const int32_t d = a.kv.head_dim;
  const T* k_base = static_cast<const T*>(a.kv.base) + a.layer * a.kv.LayerStride();
  const T* v_base = k_base + a.kv.TensorElems();
  const float slope = a.slopes[h];
  float mx = -INFINITY;
  for (int32_t j = k_begin + threadIdx.x; j < k_end; j += blockDim.x) {
    const int64_t row = table.Row(a, j, h);
    float score;
    if (row < 0) {
      atomicOr(a.error_flag, kErrorBadMetadata);
      score = -INFINITY;
    } else {
      score = Score(DotRow<T>(q_s, k_base + row, d), a.scale, slope, j);
    }
    p_s[j - k_begin] = score;
    mx = fmaxf(mx, score);
  }
  const float sum = ExpWeights(p_s, k_end - k_begin, &mx, scratch);
  if (d <= static_cast<int32_t>(blockDim.x)) {
    // Key groups x head_dim: a warp reads consecutive elements of one V row.
    const int32_t groups = blockDim.x / d;
    const int32_t g = threadIdx.x / d, e = threadIdx.x % d;
    float acc = 0.0f;
    if (g < groups) {
      for (int32_t j = k_begin + g; j < k_end; j += groups) {
        const float w = p_s[j - k_begin];
        if (w == 0.0f) continue;
        acc += w * ToF32<T>(v_base[table.Row(a, j, h) + e]);
      }
      red[threadIdx.x] = acc;
    }
    __syncthreads();
    if (threadIdx.x < d) {
      float o = 0.0f;
      for (int32_t gg = 0; gg < groups; ++gg) o += red[gg * d + threadIdx.x];
      o_s[threadIdx.x] = o;
    }
  } else {
    for (int32_t e = threadIdx.x; e < d; e += blockDim.x) {
      float o = 0.0f;
      for (int32_t j = k_begin; j < k_end; ++j) {
        const float w = p_s[j - k_begin];
        if (w == 0.0f) continue;
        o += w * ToF32<T>(v_base[table.Row(a, j, h) + e]);
      }
      o_s[e] = o;
    }
  }
  *mx_out = mx;
  *sum_out = sum;
}

template <typename T>
__global__ void __launch_bounds__(kDecodeMaxThreads) DecodeKernel(AttentionArgs a, float* part_o,
                                                               float* part_ml, int32_t max_parts) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float p_s[kPartition];
  __shared__ float o_s[kMaxHeadDim];
  __shared__ float red_v[kDecodeMaxThreads / 32][kMaxHeadDim];
  __shared__ float scratch[32];
  __shared__ int32_t blocks_s[kPartition];  // the partition's block-table window (block_size >= 1)
  PdlEnter();
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
  const int32_t bs = a.kv.block_size;
  const BlockWindow window = {blocks_s, k_begin / bs};
  for (int32_t i = threadIdx.x; i <= (k_end - 1) / bs - window.first; i += blockDim.x) {
    blocks_s[i] = table[window.first + i];
  }
  __syncthreads();

  float mx = 0.0f, sum = 0.0f;
  if ((d % Vec<T>::kN) == 0 && Aligned16(a.kv.base)) {
    DecodePartitionVec<T>(a, window, h, k_begin, k_end, q_s, p_s, red_v, scratch, o_s, &mx, &sum);
  } else {
    DecodePartitionScalar<T>(a, window, h, k_begin, k_end, q_s, p_s, &red_v[0][0], scratch, o_s, &mx, &sum);
  }
  __syncthreads();  // o_s complete

  const bool single = nparts == 1;
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(t) * heads * d + static_cast<int64_t>(h) * d;
  const int64_t part = (static_cast<int64_t>(t) * heads + h) * max_parts + p;
  const float inv = 1.0f / sum;
  for (int32_t e = threadIdx.x; e < d; e += blockDim.x) {
    if (single) {
      out[e] = FromF32<T>(o_s[e] * inv);
    } else {
      part_o[part * d + e] = o_s[e];
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
  PdlEnter();
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

int DecodeThreads(const AttentionArgs& a) {
  return DecodeThreadsSupported(a.decode_threads) ? a.decode_threads : 128;
}

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
    if (parts > kMaxGridYZ) return cudaErrorInvalidConfiguration;  // gridDim.z
    cudaError_t err = cudaSuccess;
    // Sequences are the grid's y dimension (at most 65,535): more of them (a warm-up step of
    // --max_batched_tokens rows, a huge --max_batch_size) run in slices of that many, each with
    // its per-sequence arrays offset (the kernels index them by blockIdx.y; tokens and the
    // split-KV scratch stay absolute, through query_start).
    for (int32_t first = 0; first < a.num_seqs && err == cudaSuccess; first += kMaxGridYZ) {
      AttentionArgs slice = a;
      slice.num_seqs = std::min(kMaxGridYZ, a.num_seqs - first);
      slice.query_start += first;
      slice.context_len += first;
      slice.block_tables += static_cast<int64_t>(first) * a.max_blocks_per_seq;
      const dim3 grid(a.kv.num_heads, slice.num_seqs, parts);
      BLOSSOM_DISPATCH_ELEM(a.kv.dtype, T, {
        err = LaunchKernel(a.pdl, &DecodeKernel<T>, grid, dim3(DecodeThreads(a)), 0, stream, slice,
                           part_o, part_ml, parts);
        if (err == cudaSuccess && parts > 1) {
          err = LaunchKernel(a.pdl, &DecodeReduceKernel<T>, dim3(a.kv.num_heads, slice.num_seqs),
                             dim3(128), 0, stream, slice, static_cast<const float*>(part_o),
                             static_cast<const float*>(part_ml), parts);
        }
      });
    }
    return err;
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
