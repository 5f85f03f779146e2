// AVX2 integer micro-kernels of the quantized GEMM (vpmaddubsw + vpmaddwd: 32 int8 products per
// block summed into 8 int32 lanes). Built with function target attributes and called only after
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

// R x-rows times C w-rows; one 8-lane fp32 accumulator per element. vpmaddubsw multiplies an
// unsigned by a signed byte, so each product w * x is formed as |w| * (x * sign(w)); with
// |w| <= 127 and |x| <= 127 a pair sum (<= 32258) never saturates int16.
template <int R, int C, DType D>
BLOSSOM_AVX2 void Tile(const Q8Block* x, int64_t ldx, const void* w, int64_t k, float* dots,
                       int64_t ldd) {
  const int64_t blocks = k / kQuantBlock;
  const size_t row_bytes = DTypeBytes(D, k);
  constexpr size_t kBlockBytes = D == DType::kQ8G32 ? sizeof(Q8Block) : sizeof(Q4Block);
  const void* wr[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) wr[c] = static_cast<const char*>(w) + c * row_bytes;
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i wv[C], wabs[C];
    float ws[C];
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
    for (int r = 0; r < R; ++r) {
      const Q8Block& xb = x[r * ldx + b];
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.codes));
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m256i pairs = _mm256_maddubs_epi16(wabs[c], _mm256_sign_epi8(xv, wv[c]));
        const __m256i isum = _mm256_madd_epi16(pairs, ones);
        const __m256 d = _mm256_set1_ps(xb.scale * ws[c]);
        acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(_mm256_cvtepi32_ps(isum), d));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[r][c]);
      dots[r * ldd + c] = FinishQuantDot(lanes);
    }
  }
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
