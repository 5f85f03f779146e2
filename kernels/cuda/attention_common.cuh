// Device helpers shared by the attention kernels (attention.cu: decode and the CUDA-core prefill;
// attention_tc.cu: the tensor-core prefill): a sequence's metadata, the paged KV row lookup, the
// ALiBi score in the CPU reference's operation order, and the per-sequence query-tile scan.
#ifndef BLOSSOM_KERNELS_CUDA_ATTENTION_COMMON_CUH_
#define BLOSSOM_KERNELS_CUDA_ATTENTION_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace blossom {
namespace cuda {

struct SeqInfo {
  int32_t ctx, num_new, first_token;
  bool ok;
};

__device__ __forceinline__ SeqInfo LoadSeq(const AttentionArgs& a, int32_t s) {
  SeqInfo si;
  si.first_token = a.query_start[s];
  si.num_new = a.query_start[s + 1] - si.first_token;
  si.ctx = a.context_len[s];
  const int32_t bs = a.kv.block_size;
  si.ok = si.num_new >= 0 && si.ctx >= si.num_new &&
          (static_cast<int64_t>(si.ctx) + bs - 1) / bs <= a.max_blocks_per_seq;
  return si;
}

// Offset (elements) of key/value row j of head h in a layer's K (or V) tensor, given the block
// holding j (KvRowAt) or the sequence's block table (KvRow); -1 when the block is outside the
// pool.
__device__ __forceinline__ int64_t KvRowAt(const AttentionArgs& a, int32_t block, int32_t j, int32_t h) {
  const int32_t bs = a.kv.block_size;
  if (block < 0 || block >= a.kv.num_blocks) return -1;
  return ((static_cast<int64_t>(block) * a.kv.num_heads + h) * bs + j % bs) * a.kv.head_dim;
}

__device__ __forceinline__ int64_t KvRow(const AttentionArgs& a, const int32_t* table, int32_t j,
                                         int32_t h) {
  return KvRowAt(a, table[j / a.kv.block_size], j, h);
}

__device__ __forceinline__ float Score(float dot, float scale, float slope, int32_t j) {
  return __fadd_rn(__fmul_rn(slope, static_cast<float>(j)), __fmul_rn(dot, scale));
}

// tile_start[s] = number of kTile-query tiles of sequences before s (tile_start[num_seqs] is the
// total). One block; chunks of blockDim sequences, each chunk an inclusive scan plus a carry.
template <int kTile>
__global__ void TileStartKernel(const int32_t* __restrict__ query_start, int32_t num_seqs,
                                int32_t* __restrict__ tile_start) {
  __shared__ int32_t warp_sums[32];
  __shared__ int32_t carry;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (threadIdx.x == 0) {
    carry = 0;
    tile_start[0] = 0;
  }
  __syncthreads();
  for (int32_t base = 0; base < num_seqs; base += blockDim.x) {
    const int32_t s = base + threadIdx.x;
    int32_t n = 0;
    if (s < num_seqs) n = max(0, (query_start[s + 1] - query_start[s] + kTile - 1) / kTile);
    int32_t v = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t up = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += up;
    }
    if (lane == 31) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
      int32_t w = lane < warps ? warp_sums[lane] : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int32_t up = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += up;
      }
      if (lane < warps) warp_sums[lane] = w;
    }
    __syncthreads();
    const int32_t inclusive = carry + v + (warp > 0 ? warp_sums[warp - 1] : 0);
    if (s < num_seqs) tile_start[s + 1] = inclusive;
    __syncthreads();  // everyone has read carry and warp_sums
    if (threadIdx.x == blockDim.x - 1) carry = inclusive;
    __syncthreads();
  }
}

// The sequence owning query tile b: the last s with tile_start[s] <= b (tile_start from
// TileStartKernel; b < tile_start[num_seqs]).
__device__ __forceinline__ int32_t TileOwner(const int32_t* tile_start, int32_t num_seqs, int32_t b) {
  int32_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= b) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The queries a prefill block handles: tile `tile` (of kTile queries) of sequence `seq`.
struct PrefillTile {
  int32_t seq, q_first, nq;
  int32_t pos0;    // position of the tile's first query
  int32_t kv_end;  // causal: the tile's last query sees keys [0, kv_end)
  int64_t t0;      // token row of the tile's first query
  const int32_t* table;
};

// Block b's tile, or false when it has none (past the last tile, or a sequence whose metadata
// is inconsistent: flagged once, by head 0).
template <int kTile>
__device__ __forceinline__ bool FindPrefillTile(const AttentionArgs& a, const int32_t* tile_start, int32_t b,
                                                int32_t h, PrefillTile* t) {
  if (b >= tile_start[a.num_seqs]) return false;
  t->seq = TileOwner(tile_start, a.num_seqs, b);
  const SeqInfo si = LoadSeq(a, t->seq);
  if (!si.ok) {
    if (threadIdx.x == 0 && h == 0) atomicOr(a.error_flag, kErrorBadMetadata);
    return false;
  }
  t->q_first = (b - tile_start[t->seq]) * kTile;
  t->nq = min(kTile, si.num_new - t->q_first);
  t->pos0 = si.ctx - si.num_new + t->q_first;
  t->kv_end = t->pos0 + t->nq;
  t->t0 = si.first_token + t->q_first;
  t->table = a.block_tables + static_cast<int64_t>(t->seq) * a.max_blocks_per_seq;
  return t->nq > 0;
}

// The tensor-core prefill (attention_tc.cu): whether it serves `a` (an f16/bf16 cache, head_dim
// a multiple of 16 up to 128, 16-byte aligned KV rows), and its launch. `tile_start` holds
// num_seqs + 1 ints of workspace.
bool PrefillOnTensorCores(const AttentionArgs& a);
cudaError_t LaunchPrefillOnTensorCores(const AttentionArgs& a, int32_t* tile_start, cudaStream_t stream);

}  // namespace cuda
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_ATTENTION_COMMON_CUH_
