// AVX-512 micro-kernels for the GEMM's 4- and 8-row panels (prefill and batches), bit-identical
// to the AVX2 ones (the contract in dot_tile.h). A 512-bit register holds the 8 fp32 lanes of two
// elements side by side: rows r and r + 1 of x in its halves, one weight vector (8 elements of a
// row, widened) in both, so one FMA advances two elements exactly as two AVX2 FMAs would, lane
// for lane. Twice the FMA work per instruction, and 32 registers: an 8-row tile by 6 weight rows
// holds 24 accumulators, so each weight vector read from cache feeds 4 FMAs of 16 lanes (the
// 4-row tile, 8 weight rows wide, feeds 2: it re-reads the weight panel from L2 twice as often).
// Decode (1 x-row) stays on the AVX2 kernels: it is bound by memory, not by FMAs.
// Built with function target attributes; the GEMM calls it only after CpuHasAvx512() said yes.
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {

#if defined(__x86_64__)
namespace {

// Eight weights from element i of a row, widened exactly to fp32, in both 256-bit halves.
template <DType D>
BLOSSOM_AVX512 inline __m512 LoadW8Twice(const void* w, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm512_broadcast_f32x8(_mm256_loadu_ps(static_cast<const float*>(w) + i));
  } else {
    const __m256i h = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// Rows r and r + 1 of x from element i, one per 256-bit half.
BLOSSOM_AVX512 inline __m512 LoadXPair(const float* x, int64_t ldx, int64_t i) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(x + i)),
                            _mm256_loadu_ps(x + ldx + i), 1);
}

// A row pair's 8 fp32 lanes each (rows 2p and 2p + 1 in the halves of `lanes`) into their 4 fp64
// accumulators, a[0..3] (row 2p) and a[4..7] (row 2p + 1): per element a[i] += double(l[i]) +
// double(l[i + 4]), the AVX2 path's fold. One permute lines the lanes up as [2p: l0-3, 2p + 1:
// l0-3 | 2p: l4-7, 2p + 1: l4-7], so both elements fold with 512-bit conversions and adds (8
// instructions for the pair instead of 15 with a 256-bit fold per element).
BLOSSOM_AVX512 inline void FoldPair(__m512 lanes, double* a) {
  const __m512i order = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
  const __m512 p = _mm512_permutexvar_ps(order, lanes);
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(p));
  const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(p, 1));
  _mm512_store_pd(a, _mm512_add_pd(_mm512_load_pd(a), _mm512_add_pd(lo, hi)));
}

// One block [b, end) of the contract for 2P x-rows times C w-rows (see the AVX2 TileBlock): P
// row pairs, 2P * C accumulators of 16 lanes; each widened weight vector feeds P FMAs.
template <int P, int C, DType D>
BLOSSOM_AVX512 inline void TileBlock(const float* x, int64_t ldx, const char* w, size_t row_bytes,
                                     int64_t b, int64_t end, double* acc, int64_t acc_ld) {
  const void* wr[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) wr[c] = w + c * row_bytes;
  __m512 lanes[P][C];  // [row pair][column]: rows 2p and 2p + 1 in the low and high halves
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) lanes[p][c] = _mm512_setzero_ps();
  for (int64_t i = b; i < end; i += 8) {
    __m512 xp[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) xp[p] = LoadXPair(x + 2 * p * ldx, ldx, i);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 wv = LoadW8Twice<D>(wr[c], i);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) lanes[p][c] = _mm512_fmadd_ps(xp[p], wv, lanes[p][c]);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) FoldPair(lanes[p][c], acc + (p * acc_ld + c) * 8);
}

// 2P x-rows times `cols` w-rows: groups of kWide weight rows over all their k-blocks (each weight
// row streams whole, as in the AVX2 panel), then smaller groups for what is left. 4 rows: 8 wide
// (16 accumulators); 8 rows: 6 wide (24 accumulators, 4 x pairs and a weight vector: 29 of the
// 32 registers).
template <int P, DType D>
BLOSSOM_AVX512 void Panel(const float* x, int64_t ldx, const void* w, int cols, int64_t k,
                          float* dots, int64_t ldd) {
  constexpr int kRows = 2 * P;
  constexpr int kWide = P == 2 ? 8 : 6;
  const int64_t k8 = k & ~int64_t{7};
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(D);
  const char* wc = static_cast<const char*>(w);
  alignas(64) double acc[kRows * kMaxTileCols * 4];
  for (int i = 0; i < kRows * cols * 4; ++i) acc[i] = 0.0;
  auto block_end = [k8](int64_t b) { return b + kDotBlock < k8 ? b + kDotBlock : k8; };
  int c = 0;
  for (; c + kWide <= cols; c += kWide)
    for (int64_t b = 0; b < k8; b += kDotBlock)
      TileBlock<P, kWide, D>(x, ldx, wc + c * row_bytes, row_bytes, b, block_end(b), acc + c * 8,
                             cols);
  for (; c + 4 <= cols; c += 4)
    for (int64_t b = 0; b < k8; b += kDotBlock)
      TileBlock<P, 4, D>(x, ldx, wc + c * row_bytes, row_bytes, b, block_end(b), acc + c * 8,
                         cols);
  for (; c < cols; ++c)
    for (int64_t b = 0; b < k8; b += kDotBlock)
      TileBlock<P, 1, D>(x, ldx, wc + c * row_bytes, row_bytes, b, block_end(b), acc + c * 8,
                         cols);
  // acc: [row pair][column][row 2p's 4 doubles, row 2p + 1's 4] (FoldPair's layout).
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < cols; ++j)
      dots[r * ldd + j] = FinishDot(acc + ((r / 2) * cols + j) * 8 + (r % 2) * 4, x + r * ldx,
                                    wc + j * row_bytes, D, k8, k);
}

using PanelFn = void (*)(const float*, int64_t, const void*, int, int64_t, float*, int64_t);

template <DType D>
PanelFn Pick(int rows) {
  return rows == 8 ? &Panel<4, D> : &Panel<2, D>;
}

}  // namespace

bool DotTileAvx512Supported() { return CpuHasAvx512(); }

void DotTileAvx512(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                   int64_t k, float* dots, int64_t ldd) {
  if (rows != 4 && rows != 8) {
    DotTileAvx2(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
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

bool DotTileAvx512Supported() { return false; }
void DotTileAvx512(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                   int64_t k, float* dots, int64_t ldd) {
  DotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#endif

}  // namespace blossom
