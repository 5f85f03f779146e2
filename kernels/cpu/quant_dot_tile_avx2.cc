// AVX2 integer micro-kernels of the quantized GEMM (vpmaddubsw + vpmaddwd: 32 int8 products per
// block summed into 8 int32 lanes, then into one int32 per pair). Built with function target attributes and called only after
// a run-time CPU check, like dot_tile_avx2.cc. No AVX-VNNI / AVX-512 path yet: vpdpbusd would fuse
// the two integer steps, but no CPU here has it to test against the portable path.
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_dot_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {

#if defined(__x86_64__)
namespace {

// The 32 signed codes of block b of a weight row, and its scale.
template <DType D>
BLOSSOM_AVX2 inline __m256i LoadCodes(const void* w, int64_t b, float* scale) {
  if constexpr (D == DType::kQ8G32) {
    const Q8Block* block = static_cast<const Q8Block*>(w) + b;
    *scale = block->scale;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block->codes));
  } else {
    const Q4Block* block = static_cast<const Q4Block*>(w) + b;
    *scale = block->scale;
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block->nibbles));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(packed, mask);                       // codes 0..15
    const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);   // codes 16..31
    return _mm256_sub_epi8(_mm256_set_m128i(high, low), _mm256_set1_epi8(8));
  }
}

// The block dots of R x C (row, column) pairs, each an 8-lane vector of int32 partial sums,
// reduced to one exact int32 per pair, pair (r, c) in lane r * C + c. vphaddd sums neighbours
// inside each 128-bit half; the last step adds the halves.
BLOSSOM_AVX2 inline __m256i ReducePairs8(const __m256i t[4]) {
  const __m256i u0 = _mm256_hadd_epi32(t[0], t[1]);  // halves: pairs 0..3, partial
  const __m256i u1 = _mm256_hadd_epi32(t[2], t[3]);  // halves: pairs 4..7, partial
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                          _mm256_permute2x128_si256(u0, u1, 0x31));
}
BLOSSOM_AVX2 inline __m128i ReducePairs4(__m256i t0, __m256i t1) {
  const __m256i u = _mm256_hadd_epi32(t0, t1);
  return _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
}
BLOSSOM_AVX2 inline int32_t ReducePairs1(__m256i p) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
  s = _mm_hadd_epi32(s, s);
  s = _mm_hadd_epi32(s, s);
  return _mm_cvtsi128_si32(s);
}

// The 32 products of one x block and one weight block, as 8 int32 lanes of 4 products each.
// vpmaddubsw multiplies an unsigned by a signed byte, so each product w * x is formed as
// |w| * (x * sign(w)); with |w| <= 127 and |x| <= 127 a pair sum (<= 32258) never saturates int16.
BLOSSOM_AVX2 inline __m256i BlockProducts(__m256i xv, __m256i wv, __m256i wabs, __m256i ones) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv, wv)), ones);
}

// R x-rows times C w-rows (R * C one of 8, 4, 1). Per block, every pair's exact int32 dot is
// reduced first, then the pairs' fp32 steps run side by side in the lanes of one register (the
// contract in quant_dot_tile.h): the scale work is one multiply per block for all R * C pairs
// instead of one per pair.
template <int R, int C, DType D>
BLOSSOM_AVX2 void Tile(const Q8Block* x, int64_t ldx, const void* w, int64_t k, float* dots,
                       int64_t ldd) {
  static_assert(R * C == 8 || R * C == 4 || R * C == 1, "tile shapes of quant_dot_tile.h");
  const int64_t blocks = k / kQuantBlock;
  const size_t row_bytes = DTypeBytes(D, k);
  constexpr size_t kBlockBytes = D == DType::kQ8G32 ? sizeof(Q8Block) : sizeof(Q4Block);
  const void* wr[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) wr[c] = static_cast<const char*>(w) + c * row_bytes;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc8 = _mm256_setzero_ps();
  __m128 acc4 = _mm_setzero_ps();
  float acc1 = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i wv[C], wabs[C];
    float ws[C], xs[R];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      // Decode: prefetch the same block of the next tile's rows (contiguous after this tile's),
      // so the next tile starts from cache. Q8 rows are ~1 KiB, too short a stream for the
      // hardware prefetcher to ramp up on: 1.2x on the int8 decode step (2026-11-24).
      if constexpr (R == 1)
        _mm_prefetch(static_cast<const char*>(wr[c]) + C * row_bytes + b * kBlockBytes,
                     _MM_HINT_T0);
      wv[c] = LoadCodes<D>(wr[c], b, &ws[c]);
      wabs[c] = _mm256_abs_epi8(wv[c]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) xs[r] = x[r * ldx + b].scale;
    if constexpr (R * C == 8) {  // 4 x 2: t[r] holds row r's two pairs, partially summed
      __m256i t[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r * ldx + b].codes));
        t[r] = _mm256_hadd_epi32(BlockProducts(xv, wv[0], wabs[0], ones),
                                 BlockProducts(xv, wv[1], wabs[1], ones));
      }
      const __m256i dot = ReducePairs8(t);
      // Lane r * 2 + c: xs[r] * ws[c].
      const __m256 xsd = _mm256_permutevar8x32_ps(
          _mm256_castps128_ps256(_mm_setr_ps(xs[0], xs[1], xs[2], xs[3])),
          _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
      const __m256 wsd = _mm256_setr_ps(ws[0], ws[1], ws[0], ws[1], ws[0], ws[1], ws[0], ws[1]);
      acc8 = _mm256_add_ps(acc8, _mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(xsd, wsd)));
    } else if constexpr (R * C == 4) {  // 4 x 1 (lane r) or 1 x 4 (lane c)
      __m256i p[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const int r = R == 4 ? i : 0, c = R == 4 ? 0 : i;
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r * ldx + b].codes));
        p[i] = BlockProducts(xv, wv[c], wabs[c], ones);
      }
      const __m128i dot = ReducePairs4(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
      __m128 d;
      if constexpr (R == 4) {
        d = _mm_mul_ps(_mm_setr_ps(xs[0], xs[1], xs[2], xs[3]), _mm_set1_ps(ws[0]));
      } else {
        d = _mm_mul_ps(_mm_set1_ps(xs[0]), _mm_setr_ps(ws[0], ws[1], ws[2], ws[3]));
      }
      acc4 = _mm_add_ps(acc4, _mm_mul_ps(_mm_cvtepi32_ps(dot), d));
    } else {  // 1 x 1
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].codes));
      const float d = xs[0] * ws[0];
      acc1 = acc1 + static_cast<float>(ReducePairs1(BlockProducts(xv, wv[0], wabs[0], ones))) * d;
    }
  }
  alignas(32) float lanes[8];
  if constexpr (R * C == 8) _mm256_store_ps(lanes, acc8);
  if constexpr (R * C == 4) _mm_store_ps(lanes, acc4);
  if constexpr (R * C == 1) lanes[0] = acc1;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) dots[r * ldd + c] = lanes[r * C + c];
}

using TileFn = void (*)(const Q8Block*, int64_t, const void*, int64_t, float*, int64_t);

template <DType D>
TileFn Pick(int rows, int cols) {
  if (rows == 4) return cols == 2 ? &Tile<4, 2, D> : &Tile<4, 1, D>;
  return cols == 4 ? &Tile<1, 4, D> : &Tile<1, 1, D>;
}

}  // namespace

void QuantDotTileAvx2(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                      int cols, int64_t k, float* dots, int64_t ldd) {
  const TileFn fn =
      w_dtype == DType::kQ4G32 ? Pick<DType::kQ4G32>(rows, cols) : Pick<DType::kQ8G32>(rows, cols);
  fn(x, ldx, w, k, dots, ldd);
}

#else  // not x86-64: the portable path only.

void QuantDotTileAvx2(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                      int cols, int64_t k, float* dots, int64_t ldd) {
  QuantDotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#endif

}  // namespace blossom
