// AVX2/FMA micro-kernels. Compiled for the baseline target; only these functions are built for
// AVX2 (function target attributes), and the GEMM calls them only after a runtime CPU check, so
// one binary runs everywhere. No ifunc resolvers: they break ThreadSanitizer builds.
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {

#if defined(__x86_64__)
namespace {

// Four weights from element i of a row, widened exactly to fp64. bf16 is the top half of an
// fp32, so widening it is a zero-extend and a shift before the fp32 -> fp64 conversion.
template <DType D>
BLOSSOM_AVX2 inline __m256d LoadW4(const void* w, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm256_cvtps_pd(_mm_loadu_ps(static_cast<const float*>(w) + i));
  } else {
    const __m128i h =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    if constexpr (D == DType::kBF16) {
      return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16)));
    } else {
      return _mm256_cvtps_pd(_mm_cvtph_ps(h));
    }
  }
}

// R x-rows times C w-rows, one 4-lane fp64 accumulator per element (R * C <= 12 for the shapes
// used, so they stay in registers); each widened w vector is reused across the R rows.
template <int R, int C, DType D>
BLOSSOM_AVX2 void Tile(const float* x, int64_t ldx, const void* w, int64_t k, float* dots,
                       int64_t ldd) {
  const int64_t k4 = k & ~int64_t{3};
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(D);
  const void* wr[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) wr[c] = static_cast<const char*>(w) + c * row_bytes;
  __m256d acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_pd();
  for (int64_t i = 0; i < k4; i += 4) {
    __m256d wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) wv[c] = LoadW4<D>(wr[c], i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256d xv = _mm256_cvtps_pd(_mm_loadu_ps(x + r * ldx + i));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_pd(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      alignas(32) double lanes[4];
      _mm256_store_pd(lanes, acc[r][c]);
      dots[r * ldd + c] = FinishDot(lanes, x + r * ldx, wr[c], D, k4, k);
    }
  }
}

using TileFn = void (*)(const float*, int64_t, const void*, int64_t, float*, int64_t);

template <DType D>
BLOSSOM_AVX2 TileFn Pick(int rows, int cols) {
  if (rows == 4) return cols == 3 ? &Tile<4, 3, D> : &Tile<4, 1, D>;
  if (cols == 8) return &Tile<1, 8, D>;
  return cols == 3 ? &Tile<1, 3, D> : &Tile<1, 1, D>;
}

}  // namespace

bool DotTileAvx2Supported() { return CpuHasAvx2Fma(); }

void DotTileAvx2(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                 int64_t k, float* dots, int64_t ldd) {
  TileFn fn;
  switch (w_dtype) {
    case DType::kBF16:
      fn = Pick<DType::kBF16>(rows, cols);
      break;
    case DType::kF16:
      fn = Pick<DType::kF16>(rows, cols);
      break;
    default:
      fn = Pick<DType::kF32>(rows, cols);
      break;
  }
  fn(x, ldx, w, k, dots, ldd);
}

#else  // not x86-64: the portable path only.

bool DotTileAvx2Supported() { return false; }
void DotTileAvx2(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                 int64_t k, float* dots, int64_t ldd) {
  DotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#endif

}  // namespace blossom
