// Prefill attention on tensor cores (flash-attention style), for f16 and bf16 KV caches with a
// head_dim that is a multiple of 16, up to 128.
//
// One block of 4 warps per (query tile of 64 queries of one sequence, head), like the CUDA-core
// kernel's grid (an upper bound on the tile count, tiles found through TileStartKernel). Each
// warp owns 16 query rows. Keys and values stream through shared memory 64 at a time from the
// paged cache (16-byte loads along each row), the next chunk's loads in flight in registers
// while the current chunk is computed (LoadKvChunk). Per chunk, each warp:
//   1. S = Q K^T on tensor cores (WMMA 16x16x16, fp16/bf16 inputs, fp32 accumulation);
//   2. scores as the CPU reference forms them from the dot product: slope * j + dot * scale in
//      fp32 (the dot itself is the tensor cores' fp32 sum, not the CPU's order), causal mask,
//      online softmax in fp32 (running max and sum per row);
//   3. rescales its fp32 output rows by exp(m_old - m_new) and adds P V on tensor cores, with P
//      rounded to the cache's dtype (the row sum adds the same rounded values, so the weights
//      that multiply V are exactly the ones normalised by).
// The output accumulators live in shared memory (fp32): WMMA's accumulator layout is opaque, so
// the per-row rescale cannot be applied in registers.
//
// Against the CUDA-core kernel (kept for f32 caches, other head sizes, and as the reference the
// GPU tests compare with): the same results within the dtype's tolerance, not the same bits.
#include <mma.h>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace blossom {
namespace cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kTcQTile = kTcWarps * 16;  // queries per block
constexpr int kTcKChunk = 64;            // keys per chunk
constexpr int kTcMaxHeadDim = 128;

// Leading dimensions (elements) of the shared-memory tiles. Each keeps every 16-row (and
// 16-column) fragment start 32-byte aligned, as WMMA requires, and shifts consecutive rows
// across banks.
__host__ __device__ constexpr int HalfLd(int d) { return d + 8; }  // Q, K, V: [rows, d]
constexpr int kScoreLd = kTcKChunk + 4;                            // S, fp32: [16, kTcKChunk]
constexpr int kProbLd = kTcKChunk + 8;                             // P, 16-bit: [16, kTcKChunk]
__host__ __device__ constexpr int OutLd(int d) { return d + 4; }   // O, fp32: [16, d]

// Dynamic shared memory in bytes, laid out in this order.
__host__ __device__ inline size_t TcSmemBytes(int d) {
  return 2 * (static_cast<size_t>(kTcQTile) * HalfLd(d)          // Q
              + 2 * static_cast<size_t>(kTcKChunk) * HalfLd(d)   // K, V
              + static_cast<size_t>(kTcWarps) * 16 * kProbLd)    // P per warp
         + 4 * (static_cast<size_t>(kTcWarps) * 16 * kScoreLd    // S per warp
                + static_cast<size_t>(kTcWarps) * 16 * OutLd(d)  // O per warp
                + 3 * kTcQTile);                                 // m, l, alpha per row
}

// A chunk's K/V, 16-byte pieces in flight in registers: with d <= 128, a chunk is at most
// kTcKChunk * 16 pieces of each, kLoadSlots per thread.
constexpr int kLoadSlots = kTcKChunk * (kTcMaxHeadDim / 8) / kTcThreads;

// Issues every load of chunk [j0, j0 + kTcKChunk) at once (block-table lookups first, then all
// K and V pieces): the loads of the next chunk then run while this chunk is computed, instead of
// one dependent table -> K/V round trip per piece after a barrier.
template <typename T>
__device__ __forceinline__ void LoadKvChunk(const AttentionArgs& a, const int32_t* table, int32_t h, const T* k_base,
                                            const T* v_base, int32_t j0, int32_t kv_end, int32_t vecs_per_row,
                                            uint4 (&kr)[kLoadSlots], uint4 (&vr)[kLoadSlots]) {
  const int32_t pieces = kTcKChunk * vecs_per_row;
  int64_t rows[kLoadSlots];
#pragma unroll
  for (int s = 0; s < kLoadSlots; ++s) {
    const int32_t i = threadIdx.x + s * kTcThreads, j = j0 + i / vecs_per_row;
    rows[s] = -2;  // no key there (past the chunk's pieces or the context)
    if (i < pieces && j < kv_end) {
      rows[s] = KvRow(a, table, j, h);
      if (rows[s] == -1 && i % vecs_per_row == 0) atomicOr(a.error_flag, kErrorBadMetadata);
    }
  }
#pragma unroll
  for (int s = 0; s < kLoadSlots; ++s) {
    const int32_t e = ((threadIdx.x + s * kTcThreads) % vecs_per_row) * 8;
    kr[s] = rows[s] >= 0 ? __ldg(reinterpret_cast<const uint4*>(k_base + rows[s] + e)) : make_uint4(0, 0, 0, 0);
    vr[s] = rows[s] >= 0 ? __ldg(reinterpret_cast<const uint4*>(v_base + rows[s] + e)) : make_uint4(0, 0, 0, 0);
  }
}

template <typename T>
__device__ __forceinline__ void StoreKvChunk(T* k_s, T* v_s, int32_t ld, int32_t vecs_per_row,
                                             const uint4 (&kr)[kLoadSlots], const uint4 (&vr)[kLoadSlots]) {
  const int32_t pieces = kTcKChunk * vecs_per_row;
#pragma unroll
  for (int s = 0; s < kLoadSlots; ++s) {
    const int32_t i = threadIdx.x + s * kTcThreads;
    if (i < pieces) {
      const int32_t kk = i / vecs_per_row, e = (i % vecs_per_row) * 8;
      *reinterpret_cast<uint4*>(k_s + kk * ld + e) = kr[s];
      *reinterpret_cast<uint4*>(v_s + kk * ld + e) = vr[s];
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kTcThreads) PrefillTcKernel(AttentionArgs a, const int32_t* tile_start) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int32_t heads = a.kv.num_heads, d = a.kv.head_dim;
  const int32_t h = blockIdx.y;
  PrefillTile tile;
  if (!FindPrefillTile<kTcQTile>(a, tile_start, blockIdx.x, h, &tile)) return;
  const int32_t nq = tile.nq, pos0 = tile.pos0, kv_end = tile.kv_end;
  const int32_t* table = tile.table;
  const T* k_base = static_cast<const T*>(a.kv.base) + a.layer * a.kv.LayerStride();
  const T* v_base = k_base + a.kv.TensorElems();
  const float slope = a.slopes[h];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int qkv_ld = HalfLd(d), o_ld = OutLd(d);

  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* k_s = q_s + kTcQTile * qkv_ld;
  T* v_s = k_s + kTcKChunk * qkv_ld;
  T* p_all = v_s + kTcKChunk * qkv_ld;
  float* s_all = reinterpret_cast<float*>(p_all + kTcWarps * 16 * kProbLd);
  float* o_all = s_all + kTcWarps * 16 * kScoreLd;
  float* m_s = o_all + kTcWarps * 16 * o_ld;
  float* l_s = m_s + kTcQTile;
  float* alpha_s = l_s + kTcQTile;
  // This warp's rows.
  T* p_w = p_all + warp * 16 * kProbLd;
  float* s_w = s_all + warp * 16 * kScoreLd;
  float* o_w = o_all + warp * 16 * o_ld;
  const int32_t row0 = warp * 16;  // first query row (in the tile) of this warp

  const int64_t t0 = tile.t0;
  const T* q_src = static_cast<const T*>(a.q);
  for (int32_t i = threadIdx.x; i < kTcQTile * d; i += blockDim.x) {
    const int32_t qi = i / d, e = i % d;
    q_s[qi * qkv_ld + e] = qi < nq ? q_src[((t0 + qi) * heads + h) * d + e] : FromF32<T>(0.0f);
  }
  for (int32_t i = threadIdx.x; i < kTcWarps * 16 * o_ld; i += blockDim.x) o_all[i] = 0.0f;
  if (threadIdx.x < kTcQTile) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  // The last query position any row of this warp holds (rows past nq are padding).
  const int32_t warp_last_pos = pos0 + min(row0 + 15, nq - 1);
  const bool warp_has_rows = row0 < nq;
  const int32_t vecs_per_row = d / 8;  // 16-byte pieces of a 16-bit row

  uint4 kr[kLoadSlots], vr[kLoadSlots];  // the next chunk's K/V, on their way
  if (kv_end > 0) LoadKvChunk<T>(a, table, h, k_base, v_base, 0, kv_end, vecs_per_row, kr, vr);
  for (int32_t j0 = 0; j0 < kv_end; j0 += kTcKChunk) {
    __syncthreads();  // the previous chunk's K/V are consumed (and Q, m, l, O set up)
    StoreKvChunk<T>(k_s, v_s, qkv_ld, vecs_per_row, kr, vr);
    __syncthreads();
    if (j0 + kTcKChunk < kv_end) {
      LoadKvChunk<T>(a, table, h, k_base, v_base, j0 + kTcKChunk, kv_end, vecs_per_row, kr, vr);
    }
    // A warp whose every query precedes this chunk (causal) or that has no rows skips it: its
    // probabilities would all be 0 and its rescale 1.
    if (!warp_has_rows || j0 > warp_last_pos) continue;

    // 1. S = Q K^T for this warp's 16 rows and the chunk's 64 keys.
    for (int n = 0; n < kTcKChunk / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < d; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;  // K^T: (k, n) at K[n][k]
        wmma::load_matrix_sync(qa, q_s + row0 * qkv_ld + kk, qkv_ld);
        wmma::load_matrix_sync(kb, k_s + n * 16 * qkv_ld + kk, qkv_ld);
        wmma::mma_sync(acc, qa, kb, acc);
      }
      wmma::store_matrix_sync(s_w + n * 16, acc, kScoreLd, wmma::mem_row_major);
    }
    __syncwarp();

    // 2. Online softmax: two lanes per row, 32 keys each.
    {
      const int32_t r = lane >> 1, half = lane & 1, qi = row0 + r;
      const int32_t pos = pos0 + qi;
      const bool row_ok = qi < nq;
      float scores[kTcKChunk / 2];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < kTcKChunk / 2; ++c) {
        const int32_t col = half * (kTcKChunk / 2) + c, j = j0 + col;
        float score = -INFINITY;
        if (row_ok && j <= pos) score = Score(s_w[r * kScoreLd + col], a.scale, slope, j);
        scores[c] = score;
        mx = fmaxf(mx, score);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = m_s[qi];
      const float m_new = fmaxf(m_old, mx);
      float alpha = 1.0f, sum = 0.0f;
      if (m_new != -INFINITY) alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
#pragma unroll
      for (int c = 0; c < kTcKChunk / 2; ++c) {
        const int32_t col = half * (kTcKChunk / 2) + c;
        const T p = FromF32<T>(scores[c] == -INFINITY ? 0.0f : expf(scores[c] - m_new));
        p_w[r * kProbLd + col] = p;
        sum += ToF32<T>(p);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      __syncwarp();  // both lanes of the row read m_s[qi] before it is written
      if (half == 0) {
        m_s[qi] = m_new;
        l_s[qi] = l_s[qi] * alpha + sum;
        alpha_s[qi] = alpha;
      }
    }
    __syncwarp();

    // 3. O = O * alpha + P V.
    for (int32_t i = lane; i < 16 * d; i += 32) {
      const int32_t r = i / d, e = i % d;
      o_w[r * o_ld + e] *= alpha_s[row0 + r];
    }
    __syncwarp();
    for (int dn = 0; dn < d; dn += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_w + dn, o_ld, wmma::mem_row_major);
      for (int kk = 0; kk < kTcKChunk; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;  // V: (k, n) at V[k][n]
        wmma::load_matrix_sync(pa, p_w + kk, kProbLd);
        wmma::load_matrix_sync(vb, v_s + kk * qkv_ld + dn, qkv_ld);
        wmma::mma_sync(acc, pa, vb, acc);
      }
      wmma::store_matrix_sync(o_w + dn, acc, o_ld, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (!warp_has_rows) return;
  __syncwarp();
  T* out = static_cast<T*>(a.out);
  for (int32_t i = lane; i < 16 * d; i += 32) {
    const int32_t r = i / d, e = i % d, qi = row0 + r;
    if (qi >= nq) continue;
    out[((t0 + qi) * heads + h) * d + e] = FromF32<T>(o_w[r * o_ld + e] / l_s[qi]);
  }
}

}  // namespace

bool PrefillOnTensorCores(const AttentionArgs& a) {
  return a.allow_tensor_cores && (a.kv.dtype == ElemType::kF16 || a.kv.dtype == ElemType::kBF16) &&
         a.kv.head_dim % 16 == 0 && a.kv.head_dim <= kTcMaxHeadDim && reinterpret_cast<uintptr_t>(a.kv.base) % 16 == 0;
}

cudaError_t LaunchPrefillOnTensorCores(const AttentionArgs& a, int32_t* tile_start, cudaStream_t stream) {
  TileStartKernel<kTcQTile><<<1, 1024, 0, stream>>>(a.query_start, a.num_seqs, tile_start);
  const int64_t blocks = (static_cast<int64_t>(a.num_tokens) + kTcQTile - 1) / kTcQTile + a.num_seqs;
  if (blocks > 0x7fffffff || a.kv.num_heads > 65535) return cudaErrorInvalidConfiguration;
  const size_t smem = TcSmemBytes(a.kv.head_dim);
  const dim3 grid(static_cast<unsigned>(blocks), a.kv.num_heads);
  cudaError_t err = cudaSuccess;
  if (a.kv.dtype == ElemType::kF16) {
    err = cudaFuncSetAttribute(PrefillTcKernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err == cudaSuccess) PrefillTcKernel<__half><<<grid, kTcThreads, smem, stream>>>(a, tile_start);
  } else {
    err = cudaFuncSetAttribute(PrefillTcKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err == cudaSuccess) PrefillTcKernel<__nv_bfloat16><<<grid, kTcThreads, smem, stream>>>(a, tile_start);
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace blossom
