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

// Eight weights from element i of a row, widened exactly to fp32. bf16 is the top half of an
// fp32, so widening it is a zero-extend and a shift.
template <DType D>
BLOSSOM_AVX2 inline __m256 LoadW8(const void* w, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    if constexpr (D == DType::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// One block [b, end) of the contract for R x-rows times C w-rows: one 8-lane fp32 accumulator
// per element (R * C <= 12 for the shapes used, so they stay in registers with the weight vectors
// and one x vector; each widened w vector is reused across the R rows), folded at the end into
// the element's 4-lane fp64 accumulator acc[(r * acc_ld + c) * 4] (dot_tile.h).
template <int R, int C, DType D>
BLOSSOM_AVX2 inline void TileBlock(const float* x, int64_t ldx, const char* w, size_t row_bytes,
                                   int64_t b, int64_t end, double* acc, int64_t acc_ld,
                                   const char* prefetch = nullptr) {
  const void* wr[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) wr[c] = w + c * row_bytes;
  __m256 lanes[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) lanes[r][c] = _mm256_setzero_ps();
  for (int64_t i = b; i < end; i += 8) {
    if (prefetch != nullptr) {
      constexpr int64_t kBytes = D == DType::kF32 ? 4 : 2;
#pragma GCC unroll 8
      for (int64_t off = 0; off < C * 8 * kBytes; off += 64)
        _mm_prefetch(prefetch + i * C * kBytes + off, _MM_HINT_T0);
    }
    if constexpr (R == 1) {
      // One x vector against C weight vectors, each widened just before its FMA: loading all C
      // first would need C + C + 1 registers and spill an accumulator (a store-forward on the
      // critical path of every iteration).
      const __m256 xv = _mm256_loadu_ps(x + i);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) lanes[0][c] = _mm256_fmadd_ps(xv, LoadW8<D>(wr[c], i), lanes[0][c]);
      continue;
    }
    __m256 wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) wv[c] = LoadW8<D>(wr[c], i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + i);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) lanes[r][c] = _mm256_fmadd_ps(xv, wv[c], lanes[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      double* a = acc + (r * acc_ld + c) * 4;
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(lanes[r][c]));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(lanes[r][c], 1));
      _mm256_store_pd(a, _mm256_add_pd(_mm256_load_pd(a), _mm256_add_pd(lo, hi)));
    }
}

// R x-rows times `cols` w-rows; each element's partial sums wait in `acc` between k-blocks,
// which does not change the order of its operations.
// - R = 4 (prefill, batches): one group of 3 weight rows at a time, over all its k-blocks, so
//   each weight row streams once, whole and contiguous, while the 4 x rows are reused from
//   L1/L2. Walking all the panel's rows k-block by k-block instead (short 1 KiB pieces of rows
//   4 KiB apart for f32 at k = 1024, which also map to the same L1 sets as the x rows) measured
//   12% slower on the f32 prefill shapes (gemm-bench --ms 128, 2 threads, 6 alternating rounds,
//   2026-11-24) and the same on bf16.
// - R = 1 (decode): k-blocks outer over the 8 rows of a tile, with the next-tile prefetch below.
template <int R, DType D>
BLOSSOM_AVX2 void Panel(const float* x, int64_t ldx, const void* w, int cols, int64_t k,
                        float* dots, int64_t ldd) {
  constexpr int kWide = R == 1 ? 8 : 3;  // R * kWide accumulators fit in the 16 registers
  // Decode reads each weight once, straight from DRAM. A 1 x 8 tile walks 8 rows side by side;
  // with 16-bit rows (2 KiB at k = 1024) each row is too short a stream for the hardware
  // prefetcher to ramp up before it ends, so the tile prefetches the next tile's rows (contiguous
  // after its own) while it computes: 1.3x on the bf16 LM head GEMV, one thread. f32 rows stream
  // well on their own and measured slower with it (gemm-bench --ms 1, 2026-11-24).
  constexpr bool kPrefetchNextTile = R == 1 && D != DType::kF32;
  const int64_t k8 = k & ~int64_t{7};
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(D);
  const char* wc = static_cast<const char*>(w);
  alignas(32) double acc[R * kMaxTileCols * 4];
  static_assert(R <= kMaxTileRows, "tile rows");
  for (int i = 0; i < R * cols * 4; ++i) acc[i] = 0.0;
  auto block_end = [k8](int64_t b) { return b + kDotBlock < k8 ? b + kDotBlock : k8; };
  if constexpr (R == 4) {
    int c = 0;
    for (; c + kWide <= cols; c += kWide)
      for (int64_t b = 0; b < k8; b += kDotBlock)
        TileBlock<R, kWide, D>(x, ldx, wc + c * row_bytes, row_bytes, b, block_end(b),
                               acc + c * 4, cols);
    for (; c < cols; ++c)
      for (int64_t b = 0; b < k8; b += kDotBlock)
        TileBlock<R, 1, D>(x, ldx, wc + c * row_bytes, row_bytes, b, block_end(b), acc + c * 4,
                           cols);
  } else {
    for (int64_t b = 0; b < k8; b += kDotBlock) {
      const int64_t end = block_end(b);
      int c = 0;
      for (; c + kWide <= cols; c += kWide)
        TileBlock<R, kWide, D>(x, ldx, wc + c * row_bytes, row_bytes, b, end, acc + c * 4, cols,
                               kPrefetchNextTile && cols == kWide ? wc + cols * row_bytes : nullptr);
      for (; c + 3 <= cols; c += 3)
        TileBlock<R, 3, D>(x, ldx, wc + c * row_bytes, row_bytes, b, end, acc + c * 4, cols);
      for (; c < cols; ++c)
        TileBlock<R, 1, D>(x, ldx, wc + c * row_bytes, row_bytes, b, end, acc + c * 4, cols);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < cols; ++c)
      dots[r * ldd + c] =
          FinishDot(acc + (r * cols + c) * 4, x + r * ldx, wc + c * row_bytes, D, k8, k);
}

using PanelFn = void (*)(const float*, int64_t, const void*, int, int64_t, float*, int64_t);

template <DType D>
PanelFn Pick(int rows) {
  return rows == 4 ? &Panel<4, D> : &Panel<1, D>;
}

}  // namespace

bool DotTileAvx2Supported() { return CpuHasAvx2Fma(); }

void DotTileAvx2(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                 int64_t k, float* dots, int64_t ldd) {
  if (rows == 8) {  // two 4-row tiles: the same per-element order (dot_tile.h)
    DotTileAvx2(x, ldx, 4, w, w_dtype, cols, k, dots, ldd);
    DotTileAvx2(x + 4 * ldx, ldx, 4, w, w_dtype, cols, k, dots + 4 * ldd, ldd);
    return;
  }
  PanelFn fn;
  switch (w_dtype) {
    case DType::kBF16:
      fn = Pick<DType::kBF16>(rows);
      break;
    case DType::kF16:
      fn = Pick<DType::kF16>(rows);
      break;
    default:
      fn = Pick<DType::kF32>(rows);
      break;
  }
  fn(x, ldx, w, cols, k, dots, ldd);
}

#else  // not x86-64: the portable path only.

bool DotTileAvx2Supported() { return false; }
void DotTileAvx2(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                 int64_t k, float* dots, int64_t ldd) {
  DotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#endif

}  // namespace blossom
