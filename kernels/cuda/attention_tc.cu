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

// The tile's kTcQTile query rows of head h into q_s (row stride `ld`), zeros past the tile's nq.
template <typename T>
__device__ __forceinline__ void LoadQTile(const AttentionArgs& a, const PrefillTile& tile, int32_t h, int32_t d,
                                          int32_t ld, T* q_s) {
  const T* q_src = static_cast<const T*>(a.q);
  const int32_t heads = a.kv.num_heads;
  for (int32_t i = threadIdx.x; i < kTcQTile * d; i += kTcThreads) {
    const int32_t qi = i / d, e = i % d;
    q_s[qi * ld + e] = qi < tile.nq ? q_src[((tile.t0 + qi) * heads + h) * d + e] : FromF32<T>(0.0f);
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
  LoadQTile<T>(a, tile, h, d, qkv_ld, q_s);
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

// ---- The register-accumulator kernel (AttentionArgs::mma_prefill) ----
//
// FlashAttention-2's layout on mma.sync.m16n8k16 (bf16/f16 inputs, fp32 accumulation): the same
// grid, tiles, chunking and K/V loads as PrefillTcKernel, but S, P and O never leave registers.
// Per chunk of kTcKChunk keys, a warp (16 query rows) computes S = Q K^T as 8 n-tiles of 8 keys,
// applies the scores, causal mask and online softmax to its fragments (a row's values are spread
// over the 4 lanes of a quad: 2 per n-tile), rescales O in place, and adds P V with the score
// fragments repacked as the A operand (the C layout of two adjacent n-tiles is exactly the A
// layout of one k-step; the fragment layouts are at Mma16816 in common.cuh).
// Numerics: the WMMA kernel's contract (scores in fp32 as Score() forms them, P rounded to the
// cache dtype, the row sums over the rounded values). 52 KB of shared memory at head_dim 128
// (Q, K and V tiles only). Head sizes 64, 80, 96 and 128 (MmaServesHeadDim); others keep the
// WMMA kernel.

// Two values rounded to T, the lower index in the low half (mma's packing); `rounded` gets them
// back as fp32.
template <typename T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi, float* rounded) {
  const T l = FromF32<T>(lo), h = FromF32<T>(hi);
  rounded[0] = ToF32<T>(l);
  rounded[1] = ToF32<T>(h);
  return static_cast<uint32_t>(reinterpret_cast<const uint16_t&>(l)) |
         (static_cast<uint32_t>(reinterpret_cast<const uint16_t&>(h)) << 16);
}

__device__ __forceinline__ uint32_t Load32(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }

template <typename T, int kD>
__global__ void __launch_bounds__(kTcThreads) PrefillMmaKernel(AttentionArgs a, const int32_t* tile_start) {
  constexpr int kKSteps = kD / 16;   // k-steps of Q K^T
  constexpr int kOTiles = kD / 8;    // n-tiles of O
  constexpr int kSTiles = kTcKChunk / 8;
  constexpr int kLd = kD + 8;        // halves per smem row: rows 16 bytes apart in banks
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* k_s = q_s + kTcQTile * kLd;
  T* v_s = k_s + kTcKChunk * kLd;
  const uint16_t* v_bits = reinterpret_cast<const uint16_t*>(v_s);

  const int32_t heads = a.kv.num_heads;
  const int32_t h = blockIdx.y;
  PrefillTile tile;
  if (!FindPrefillTile<kTcQTile>(a, tile_start, blockIdx.x, h, &tile)) return;
  const int32_t nq = tile.nq, pos0 = tile.pos0, kv_end = tile.kv_end;
  const T* k_base = static_cast<const T*>(a.kv.base) + a.layer * a.kv.LayerStride();
  const T* v_base = k_base + a.kv.TensorElems();
  const float slope = a.slopes[h];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int32_t row0 = warp * 16;
  const int64_t t0 = tile.t0;

  LoadQTile<T>(a, tile, h, kD, kLd, q_s);
  // The two rows of this lane: row0 + g and row0 + g + 8 (rows past nq are padding).
  const int32_t pos_lo = pos0 + row0 + g, pos_hi = pos_lo + 8;
  const bool ok_lo = row0 + g < nq, ok_hi = row0 + g + 8 < nq;
  const int32_t warp_last_pos = pos0 + min(row0 + 15, nq - 1);
  const bool warp_has_rows = row0 < nq;

  float o[kOTiles][4];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  uint4 kr[kLoadSlots], vr[kLoadSlots];
  constexpr int32_t kVecsPerRow = kD / 8;
  if (kv_end > 0) LoadKvChunk<T>(a, tile.table, h, k_base, v_base, 0, kv_end, kVecsPerRow, kr, vr);
  for (int32_t j0 = 0; j0 < kv_end; j0 += kTcKChunk) {
    __syncthreads();  // the previous chunk is consumed (and Q is in shared memory)
    StoreKvChunk<T>(k_s, v_s, kLd, kVecsPerRow, kr, vr);
    __syncthreads();
    if (j0 + kTcKChunk < kv_end) {
      LoadKvChunk<T>(a, tile.table, h, k_base, v_base, j0 + kTcKChunk, kv_end, kVecsPerRow, kr, vr);
    }
    if (!warp_has_rows || j0 > warp_last_pos) continue;

    // 1. S = Q K^T.
    float s[kSTiles][4];
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const T* qa = q_s + (row0 + g) * kLd + ks * 16 + 2 * t;
      const uint32_t qf[4] = {Load32(qa), Load32(qa + 8 * kLd), Load32(qa + 8), Load32(qa + 8 * kLd + 8)};
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        const T* kb = k_s + (n * 8 + g) * kLd + ks * 16 + 2 * t;
        Mma16816<T>(s[n], qf, Load32(kb), Load32(kb + 8));
      }
    }

    // 2. Scores, causal mask and the online softmax of the lane's two rows.
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int32_t j = j0 + n * 8 + 2 * t + c;
        s[n][c] = ok_lo && j <= pos_lo ? Score(s[n][c], a.scale, slope, j) : -INFINITY;
        s[n][2 + c] = ok_hi && j <= pos_hi ? Score(s[n][2 + c], a.scale, slope, j) : -INFINITY;
        mx_lo = fmaxf(mx_lo, s[n][c]);
        mx_hi = fmaxf(mx_hi, s[n][2 + c]);
      }
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {  // the quad sharing the rows
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, x));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, x));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    const float alpha_lo = m_lo == -INFINITY ? 0.0f : expf(m_lo - mn_lo);
    const float alpha_hi = m_hi == -INFINITY ? 0.0f : expf(m_hi - mn_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    uint32_t p[kSTiles][2];  // P rounded to T, packed: rows g (c0, c1) and g + 8 (c2, c3)
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
      float r[2];
      p[n][0] = Pack2<T>(s[n][0] == -INFINITY ? 0.0f : expf(s[n][0] - mn_lo),
                         s[n][1] == -INFINITY ? 0.0f : expf(s[n][1] - mn_lo), r);
      sum_lo += r[0] + r[1];
      p[n][1] = Pack2<T>(s[n][2] == -INFINITY ? 0.0f : expf(s[n][2] - mn_hi),
                         s[n][3] == -INFINITY ? 0.0f : expf(s[n][3] - mn_hi), r);
      sum_hi += r[0] + r[1];
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, x);
      sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, x);
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;

    // 3. O = O * alpha + P V; P's k-step u is n-tiles 2u and 2u + 1 of S.
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      o[n][0] *= alpha_lo;
      o[n][1] *= alpha_lo;
      o[n][2] *= alpha_hi;
      o[n][3] *= alpha_hi;
    }
#pragma unroll
    for (int u = 0; u < kTcKChunk / 16; ++u) {
      const uint32_t pa[4] = {p[2 * u][0], p[2 * u][1], p[2 * u + 1][0], p[2 * u + 1][1]};
      const int32_t k0 = u * 16 + 2 * t;  // this lane's keys: k0, k0 + 1, k0 + 8, k0 + 9
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        const int32_t col = n * 8 + g;
        const uint32_t b0 = static_cast<uint32_t>(v_bits[k0 * kLd + col]) |
                            (static_cast<uint32_t>(v_bits[(k0 + 1) * kLd + col]) << 16);
        const uint32_t b1 = static_cast<uint32_t>(v_bits[(k0 + 8) * kLd + col]) |
                            (static_cast<uint32_t>(v_bits[(k0 + 9) * kLd + col]) << 16);
        Mma16816<T>(o[n], pa, b0, b1);
      }
    }
  }

  T* out = static_cast<T*>(a.out);
  const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) {
    const int32_t e = n * 8 + 2 * t;
    float r[2];
    if (ok_lo) {
      *reinterpret_cast<uint32_t*>(out + ((t0 + row0 + g) * heads + h) * kD + e) =
          Pack2<T>(o[n][0] * inv_lo, o[n][1] * inv_lo, r);
    }
    if (ok_hi) {
      *reinterpret_cast<uint32_t*>(out + ((t0 + row0 + g + 8) * heads + h) * kD + e) =
          Pack2<T>(o[n][2] * inv_hi, o[n][3] * inv_hi, r);
    }
  }
}

__host__ __device__ constexpr size_t MmaSmemBytes(int d) {
  return 2 * static_cast<size_t>(kTcQTile + 2 * kTcKChunk) * (d + 8);
}

template <typename T, int kD>
cudaError_t LaunchMma(const AttentionArgs& a, int32_t* tile_start, dim3 grid, cudaStream_t stream) {
  constexpr size_t kSmem = MmaSmemBytes(kD);
  if (kSmem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(PrefillMmaKernel<T, kD>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
    if (err != cudaSuccess) return err;
  }
  PrefillMmaKernel<T, kD><<<grid, kTcThreads, kSmem, stream>>>(a, tile_start);
  return cudaGetLastError();
}

// The BLOOM family's head sizes (560m: 64, 3b: 80, 1b1: 96, 1b7/7b1/176b: 128); each is a kernel
// of its own (the fragments are unrolled over head_dim), so other sizes stay on the WMMA kernel.
bool MmaServesHeadDim(int32_t d) { return d == 64 || d == 80 || d == 96 || d == 128; }

template <typename T>
cudaError_t LaunchMmaForHeadDim(const AttentionArgs& a, int32_t* tile_start, dim3 grid, cudaStream_t stream) {
  switch (a.kv.head_dim) {
    case 64: return LaunchMma<T, 64>(a, tile_start, grid, stream);
    case 80: return LaunchMma<T, 80>(a, tile_start, grid, stream);
    case 96: return LaunchMma<T, 96>(a, tile_start, grid, stream);
    case 128: return LaunchMma<T, 128>(a, tile_start, grid, stream);
    default: return cudaErrorInvalidValue;
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
  if (a.mma_prefill && MmaServesHeadDim(a.kv.head_dim)) {
    if (a.kv.dtype == ElemType::kF16) return LaunchMmaForHeadDim<__half>(a, tile_start, grid, stream);
    return LaunchMmaForHeadDim<__nv_bfloat16>(a, tile_start, grid, stream);
  }
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
