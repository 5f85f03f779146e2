#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/exp_poly.h"
#include "kernels/cpu/vector_ops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

constexpr int kSumLanes = 16;

// The contract's fold of the 16 sum lanes: i + 8, then i + 4, i + 2, i + 1.
float FoldSumLanes(float lanes[kSumLanes]) {
  for (int half = kSumLanes / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) lanes[i] = lanes[i] + lanes[i + half];
  return lanes[0];
}

// vector_ops over fp32 or bf16 rows, by overload.
inline float RowDot(const float* q, const float* row, int64_t d, bool avx2) { return DotF32(q, row, d, avx2); }
inline float RowDot(const float* q, const uint16_t* row, int64_t d, bool avx2) { return DotBf16(q, row, d, avx2); }
inline void RowsDot(const float* q, const float* const* rows, int64_t n, int64_t d, float* out, bool avx2) {
  DotRowsF32(q, rows, n, d, out, avx2);
}
inline void RowsDot(const float* q, const uint16_t* const* rows, int64_t n, int64_t d, float* out, bool avx2) {
  DotRowsBf16(q, rows, n, d, out, avx2);
}
inline void RowsAxpy(const float* w, const float* const* rows, int64_t n, int64_t d, float* y, bool avx2) {
  AxpyRowsF32(w, rows, n, d, y, avx2);
}
inline void RowsAxpy(const float* w, const uint16_t* const* rows, int64_t n, int64_t d, float* y, bool avx2) {
  AxpyRowsBf16(w, rows, n, d, y, avx2);
}

// Scores from `begin` on, scalar: the vector paths' tails and the portable path.
float TransformScoresScalar(float* s, int64_t begin, int64_t n, float slope, float scale,
                            float max_score) {
  for (int64_t j = begin; j < n; ++j) {
    s[j] = slope * static_cast<float>(j) + s[j] * scale;
    max_score = std::max(max_score, s[j]);
  }
  return max_score;
}

void ExpAndSumScalar(float* s, int64_t begin, int64_t n, float max_score,
                     float lanes[kSumLanes]) {
  for (int64_t j = begin; j < n; ++j) {
    s[j] = ExpNonPositive(s[j] - max_score);
    lanes[j % kSumLanes] += s[j];
  }
}

void ScaleScalar(float* s, int64_t begin, int64_t n, float factor) {
  for (int64_t j = begin; j < n; ++j) s[j] *= factor;
}

// Raw dots s[0, n) in, probabilities out.
void SoftmaxRowPortable(float* s, int64_t n, float slope, float scale) {
  const float max_score =
      TransformScoresScalar(s, 0, n, slope, scale, -std::numeric_limits<float>::infinity());
  float lanes[kSumLanes] = {};
  ExpAndSumScalar(s, 0, n, max_score, lanes);
  ScaleScalar(s, 0, n, 1.0f / FoldSumLanes(lanes));
}

#if defined(__x86_64__)
BLOSSOM_AVX2 void SoftmaxRowAvx2(float* s, int64_t n, float slope, float scale) {
  const int64_t n16 = n & ~int64_t{kSumLanes - 1};
  const __m256 slope_v = _mm256_set1_ps(slope), scale_v = _mm256_set1_ps(scale);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 max_v = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n16; j += 8) {
    const __m256 pos = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_set1_epi32(j), iota));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(slope_v, pos),
                                   _mm256_mul_ps(_mm256_loadu_ps(s + j), scale_v));
    _mm256_storeu_ps(s + j, v);
    max_v = _mm256_max_ps(max_v, v);
  }
  alignas(32) float lanes[kSumLanes];
  _mm256_store_ps(lanes, max_v);
  float max_score = *std::max_element(lanes, lanes + 8);
  max_score = TransformScoresScalar(s, n16, n, slope, scale, max_score);
  const __m256 m = _mm256_set1_ps(max_score);
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();  // lanes 0-7 and 8-15
  for (int64_t j = 0; j < n16; j += kSumLanes) {
    const __m256 e0 = ExpNonPositiveAvx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    const __m256 e1 = ExpNonPositiveAvx2(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), m));
    _mm256_storeu_ps(s + j, e0);
    _mm256_storeu_ps(s + j + 8, e1);
    lo = _mm256_add_ps(lo, e0);
    hi = _mm256_add_ps(hi, e1);
  }
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  ExpAndSumScalar(s, n16, n, max_score, lanes);
  const float inv = 1.0f / FoldSumLanes(lanes);
  const __m256 inv_v = _mm256_set1_ps(inv);
  for (int64_t j = 0; j < n16; j += 8)
    _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv_v));
  ScaleScalar(s, n16, n, inv);
}

BLOSSOM_AVX512 void SoftmaxRowAvx512(float* s, int64_t n, float slope, float scale) {
  const int64_t n16 = n & ~int64_t{kSumLanes - 1};
  const __m512 slope_v = _mm512_set1_ps(slope), scale_v = _mm512_set1_ps(scale);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 max_v = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n16; j += kSumLanes) {
    const __m512 pos = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_set1_epi32(j), iota));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(slope_v, pos),
                                   _mm512_mul_ps(_mm512_loadu_ps(s + j), scale_v));
    _mm512_storeu_ps(s + j, v);
    max_v = _mm512_max_ps(max_v, v);
  }
  float max_score = n16 > 0 ? _mm512_reduce_max_ps(max_v) : -std::numeric_limits<float>::infinity();
  max_score = TransformScoresScalar(s, n16, n, slope, scale, max_score);
  const __m512 m = _mm512_set1_ps(max_score);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n16; j += kSumLanes) {
    const __m512 e = ExpNonPositiveAvx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
    _mm512_storeu_ps(s + j, e);
    acc = _mm512_add_ps(acc, e);
  }
  alignas(64) float lanes[kSumLanes];
  _mm512_store_ps(lanes, acc);
  ExpAndSumScalar(s, n16, n, max_score, lanes);
  const float inv = 1.0f / FoldSumLanes(lanes);
  const __m512 inv_v = _mm512_set1_ps(inv);
  for (int64_t j = 0; j < n16; j += kSumLanes)
    _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), inv_v));
  ScaleScalar(s, n16, n, inv);
}

// 8 or 16 values of an fp32 or bf16 row (uint16_t: bf16 bits, widened exactly) as fp32.
BLOSSOM_AVX512 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
BLOSSOM_AVX512 inline __m256 Load8(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
BLOSSOM_AVX512 inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
BLOSSOM_AVX512 inline __m512 Load16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// Dots of 4 queries with keys [0, n): 4 x 4 tiles of 8-lane accumulators (16 of the 32 ymm
// registers AVX-512 VL gives), each query reduced as Dot4RowsAvx2 does (vector_ops.cc), so every
// dot has DotF32's bits; each key vector loaded feeds 4 queries. n % 4 keys go one by one.
// d % 8 == 0.
template <typename T>
BLOSSOM_AVX512 void Dots4QueriesAvx512(const float* const q[4], const T* const* keys, int64_t n,
                                       int64_t d, float* const s[4]) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; ++a)
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) acc[a][b] = _mm256_setzero_ps();
    const T* k[4] = {keys[j], keys[j + 1], keys[j + 2], keys[j + 3]};
    for (int64_t i = 0; i < d; i += 8) {
      __m256 kv[4];
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) kv[b] = Load8(k[b] + i);
#pragma GCC unroll 4
      for (int a = 0; a < 4; ++a) {
        const __m256 qv = _mm256_loadu_ps(q[a] + i);
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) acc[a][b] = _mm256_fmadd_ps(qv, kv[b], acc[a][b]);
      }
    }
#pragma GCC unroll 4
    for (int a = 0; a < 4; ++a) {
      __m128 p[4];
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b)
        p[b] = _mm_add_ps(_mm256_castps256_ps128(acc[a][b]), _mm256_extractf128_ps(acc[a][b], 1));
      _MM_TRANSPOSE4_PS(p[0], p[1], p[2], p[3]);
      _mm_storeu_ps(s[a] + j, _mm_add_ps(_mm_add_ps(p[0], p[2]), _mm_add_ps(p[1], p[3])));
    }
  }
  for (; j < n; ++j)
    for (int a = 0; a < 4; ++a) s[a][j] = RowDot(q[a], keys[j], d, /*avx2=*/true);
}

// out[a] = fma(p[a][j], v_j, out[a]) for j in [0, n) in order, for 4 queries at once: per 64
// output columns, 4 queries x 4 zmm accumulators, so each value vector loaded feeds 4 queries.
// Elementwise FMAs in the same order as AxpyRowsF32, so the same bits. d % 16 == 0.
template <typename T>
BLOSSOM_AVX512 void Axpy4QueriesAvx512(const float* const p[4], const T* const* values, int64_t n,
                                       int64_t d, float* const out[4]) {
  for (int64_t c0 = 0; c0 < d; c0 += 64) {
    const int vecs = static_cast<int>(std::min<int64_t>(64, d - c0) / 16);
    __m512 acc[4][4];
    for (int a = 0; a < 4; ++a)
      for (int v = 0; v < vecs; ++v) acc[a][v] = _mm512_loadu_ps(out[a] + c0 + 16 * v);
    if (vecs == 4) {
      for (int64_t j = 0; j < n; ++j) {
        const T* x = values[j] + c0;
        const __m512 x0 = Load16(x), x1 = Load16(x + 16), x2 = Load16(x + 32), x3 = Load16(x + 48);
#pragma GCC unroll 4
        for (int a = 0; a < 4; ++a) {
          const __m512 w = _mm512_set1_ps(p[a][j]);
          acc[a][0] = _mm512_fmadd_ps(w, x0, acc[a][0]);
          acc[a][1] = _mm512_fmadd_ps(w, x1, acc[a][1]);
          acc[a][2] = _mm512_fmadd_ps(w, x2, acc[a][2]);
          acc[a][3] = _mm512_fmadd_ps(w, x3, acc[a][3]);
        }
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const T* x = values[j] + c0;
        for (int a = 0; a < 4; ++a) {
          const __m512 w = _mm512_set1_ps(p[a][j]);
          for (int v = 0; v < vecs; ++v) acc[a][v] = _mm512_fmadd_ps(w, Load16(x + 16 * v), acc[a][v]);
        }
      }
    }
    for (int a = 0; a < 4; ++a)
      for (int v = 0; v < vecs; ++v) _mm512_storeu_ps(out[a] + c0 + 16 * v, acc[a][v]);
  }
}
#endif  // __x86_64__

void SoftmaxRow(float* s, int64_t n, float slope, float scale, AttentionIsa isa) {
#if defined(__x86_64__)
  if (isa == AttentionIsa::kAvx512) return SoftmaxRowAvx512(s, n, slope, scale);
  if (isa == AttentionIsa::kAvx2) return SoftmaxRowAvx2(s, n, slope, scale);
#endif
  SoftmaxRowPortable(s, n, slope, scale);
}

// AttendQueries over key and value rows of T (float, or uint16_t: bf16 bits).
template <typename T>
void AttendRows(const AttentionQueries& a, const T* const* keys, const T* const* values, AttentionIsa isa,
                std::vector<float>* scores) {
  const int64_t nq = a.num_queries, d = a.head_dim;
  const int64_t keys_all = a.first_pos + nq;  // the last query's key count
  const int64_t stride = (keys_all + kSumLanes - 1) & ~int64_t{kSumLanes - 1};
  if (scores->size() < static_cast<size_t>(stride * nq)) scores->resize(stride * nq);
  const float* q[kAttentionQueryBlock];
  float* s[kAttentionQueryBlock];
  float* out[kAttentionQueryBlock];
  for (int64_t i = 0; i < nq; ++i) {
    q[i] = a.q + i * a.q_stride;
    s[i] = scores->data() + i * stride;
    out[i] = a.out + i * a.out_stride;
  }
  const bool avx2 = isa != AttentionIsa::kPortable;
  const bool block4 = nq == 4 && isa == AttentionIsa::kAvx512;
#if defined(__x86_64__)
  // The block kernel also forms the dots of keys a query does not see (at most 3 per query):
  // they are never read.
  if (block4 && d % 8 == 0) {
    Dots4QueriesAvx512(q, keys, keys_all, d, s);
  } else
#endif
  {
    for (int64_t i = 0; i < nq; ++i) RowsDot(q[i], keys, a.first_pos + i + 1, d, s[i], avx2);
  }
  for (int64_t i = 0; i < nq; ++i) {
    SoftmaxRow(s[i], a.first_pos + i + 1, a.slope, a.scale, isa);
    std::fill(out[i], out[i] + d, 0.0f);
  }
  int64_t shared = 0;  // keys every query of the block sees, done together
#if defined(__x86_64__)
  if (block4 && d % 16 == 0) {
    shared = a.first_pos + 1;
    Axpy4QueriesAvx512(s, values, shared, d, out);
  }
#endif
  // The rest of each query's keys, continuing its accumulation in order.
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t n = a.first_pos + i + 1;
    RowsAxpy(s[i] + shared, values + shared, n - shared, d, out[i], avx2);
  }
}

}  // namespace

AttentionIsa BestAttentionIsa() {
  if (CpuHasAvx512()) return AttentionIsa::kAvx512;
  if (CpuHasAvx2Fma()) return AttentionIsa::kAvx2;
  return AttentionIsa::kPortable;
}

void AttendQueries(const AttentionQueries& a, AttentionIsa isa, std::vector<float>* scores) {
  if (a.bf16_keys != nullptr) {
    AttendRows(a, a.bf16_keys, a.bf16_values, isa, scores);
  } else {
    AttendRows(a, a.keys, a.values, isa, scores);
  }
}

}  // namespace blossom
