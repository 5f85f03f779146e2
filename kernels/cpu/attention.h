// Causal ALiBi attention for a run of consecutive queries of one sequence and one head, over key
// and value rows given by pointer (the paged KV cache scatters them). The CPU backend's Attention
// op splits a step into such runs (query blocks) and calls this once per (head, block).
//
// Operation order for each query (position pos, keys 0..pos), the same IEEE operations on every
// instruction-set path (portable, AVX2, AVX-512), so the paths agree bit for bit:
//   s_j = slope * j + DotF32(q, k_j) * scale    (vector_ops.h's dot; two products, then the add)
//   m   = max_j s_j
//   e_j = ExpNonPositive(s_j - m)                (exp_poly.h)
//   sum = 16 lanes, lane l adding e_j for j = l (mod 16) in order of j, folded as lane i + lane
//         i + 8, then i + 4, i + 2, i + 1
//   p_j = e_j * (1 / sum)
//   out = fma(p_j, v_j, out) for j = 0..pos in order, from out = 0 (vector_ops.h's axpy).
// A query's result depends only on its q and its keys and values, never on the other queries of
// its block nor on how the step was split, so attention stays batch invariant.
//
// Why blocks: a block's queries share their keys and values, so each key and value row read from
// cache feeds several queries (the AVX-512 path holds 4 queries' accumulators in registers).
#ifndef BLOSSOM_KERNELS_CPU_ATTENTION_H_
#define BLOSSOM_KERNELS_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

namespace blossom {

// Queries per block: the AVX-512 kernels' register tile (4 queries x 4 keys of dots, 4 queries x
// 64 columns of output).
inline constexpr int64_t kAttentionQueryBlock = 4;

enum class AttentionIsa { kPortable, kAvx2, kAvx512 };

// The fastest path this CPU runs.
AttentionIsa BestAttentionIsa();

struct AttentionQueries {
  const float* q = nullptr;  // query i: head_dim floats at q + i * q_stride
  int64_t q_stride = 0;
  float* out = nullptr;  // output i: head_dim floats at out + i * out_stride
  int64_t out_stride = 0;
  int64_t num_queries = 0;  // 1 .. kAttentionQueryBlock
  int64_t first_pos = 0;    // query i is at position first_pos + i: it sees keys 0 .. first_pos + i
  // Key and value rows 0 .. first_pos + num_queries - 1 of this head: fp32 rows, or (when
  // bf16_keys is set) rows of bf16 bits, widened exactly in registers: the same bits as fp32 rows
  // holding the same values (a bf16 KV cache).
  const float* const* keys = nullptr;
  const float* const* values = nullptr;
  const uint16_t* const* bf16_keys = nullptr;
  const uint16_t* const* bf16_values = nullptr;
  int64_t head_dim = 0;
  float slope = 0.0f;  // this head's ALiBi slope
  float scale = 0.0f;  // 1 / sqrt(head_dim)
};

// Writes every query's output. `scores` is the calling thread's scratch (kept between calls so a
// steady-state step allocates nothing). The caller checks the arguments: pointers valid, counts
// in range, isa supported by this CPU.
void AttendQueries(const AttentionQueries& a, AttentionIsa isa, std::vector<float>* scores);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_ATTENTION_H_
