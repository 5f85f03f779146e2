// AVX-512 micro-kernels for the GEMM's 4- and 8-row panels (prefill and batches), and every tile
// over row-paired weights (weight_pairs.h), bit-identical to the AVX2 ones (the contract in
// dot_tile.h). A 512-bit register holds the 8 fp32 lanes of two
// elements side by side: weight rows c and c + 1 (8 elements each, widened) in its halves, one x
// vector broadcast to both, so one FMA advances two elements exactly as two AVX2 FMAs would, lane
// for lane. Twice the FMA work per instruction, and 32 registers: an 8-row tile by 3 weight-row
// pairs holds 24 accumulators, so each paired weight vector read from cache feeds 8 FMAs.
// Why the weights are paired and x broadcast, not the other way round: the x broadcast is a plain
// load, and a 16-bit pair is widened once for both rows (pair, widen: 3 shuffle/shift
// instructions where two rows widened apart and an x pair took 5), 1.10x on the bf16 GEMM and
// the same on f32 (benchmarks/results/2026-11-25-cpu-gemm-pairs-block-1024.md).
// Decode (1 x-row) over row-major weights stays on the AVX2 kernels: it is bound by memory, not by
// FMAs; over row-paired weights it is a 1 x 12-pair tile here (nothing to unpair).
// Built with function target attributes; the GEMM calls it only after CpuHasAvx512() said yes.
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/weight_pairs.h"

#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {

#if defined(__x86_64__)
namespace {

// Eight weights from element i of rows a and b, widened exactly to fp32: row a's in the low
// 256-bit half, row b's in the high half. The 16-bit dtypes are paired before widening, so one
// widening serves both rows.
template <DType D>
BLOSSOM_AVX512 inline __m512 LoadWPair(const void* a, const void* b, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm256_loadu_ps(static_cast<const float*>(a) + i)),
        _mm256_loadu_ps(static_cast<const float*>(b) + i), 1);
  } else {
    const __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(a) + i))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(b) + i)), 1);
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// Eight x values from element i of a row, in both 256-bit halves (a load, no shuffle).
BLOSSOM_AVX512 inline __m512 LoadX8Twice(const float* x, int64_t i) {
  return _mm512_broadcast_f32x8(_mm256_loadu_ps(x + i));
}

// The 16 fp32 lanes of two elements (one per 256-bit half of `lanes`) into their 4 fp64
// accumulators each, a[0..3] (low half) and a[4..7] (high half): per element a[i] +=
// double(l[i]) + double(l[i + 4]), the AVX2 path's fold. One permute lines the lanes up as
// [low: l0-3, high: l0-3 | low: l4-7, high: l4-7], so both elements fold with 512-bit conversions
// and adds (8 instructions for the pair instead of 15 with a 256-bit fold per element).
BLOSSOM_AVX512 inline void FoldPair(__m512 lanes, double* a) {
  const __m512i order = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
  const __m512 p = _mm512_permutexvar_ps(order, lanes);
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(p));
  const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(p, 1));
  _mm512_store_pd(a, _mm512_add_pd(_mm512_load_pd(a), _mm512_add_pd(lo, hi)));
}

constexpr int64_t ElemBytes(DType d) { return d == DType::kF32 ? 4 : 2; }

// Sixteen weights of a row pair (weight_pairs.h) from `p`: eight of the pair's first row then
// the same eight of its second, widened exactly to fp32 into the low and high 256-bit halves, as
// LoadWPair places them.
template <DType D>
BLOSSOM_AVX512 inline __m512 LoadInterleavedPair(const char* p) {
  if constexpr (D == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// Where a tile block's weight pairs come from, pair q at element i (a multiple of 8):
//   RowPairs:         rows 2q and 2q + 1 of a row-major matrix, row_bytes apart (row_bytes = 0
//                     pairs a row with itself);
//   InterleavedPairs: the q-th row pair of a row-paired matrix (weight_pairs.h), pair_bytes apart.
// Either way q streams: the tiles read several weight streams at once, which the hardware
// prefetchers serve better from DRAM than one.
template <DType D>
struct RowPairs {
  const char* w;
  size_t row_bytes;
  BLOSSOM_AVX512 __m512 operator()(int q, int64_t i) const {
    return LoadWPair<D>(w + 2 * q * row_bytes, w + (2 * q + 1) * row_bytes, i);
  }
};
template <DType D>
struct InterleavedPairs {
  const char* w;
  int64_t pair_bytes;
  BLOSSOM_AVX512 __m512 operator()(int q, int64_t i) const {
    return LoadInterleavedPair<D>(w + q * pair_bytes + i * 2 * ElemBytes(D));
  }
};

// One block [b, end) of the contract for R x-rows times Q weight-row pairs (from `pairs`): R * Q
// accumulators of 16 lanes, element (r, 2q) in the low half and (r, 2q + 1) in the high half.
// Each paired, widened weight vector feeds R FMAs and each broadcast x vector Q. The pair's
// element accumulators are adjacent in `acc`: (r * acc_ld + 2q) * 4, 8 doubles, 64-byte aligned
// (acc_ld even). Each step also prefetches one line of `prefetch` into L2 (dot_tile.h), if any
// is left.
template <int R, int Q, DType D, typename Pairs>
BLOSSOM_AVX512 inline void TileBlock(const float* x, int64_t ldx, const Pairs& pairs, int64_t b,
                                     int64_t end, double* acc, int64_t acc_ld,
                                     WeightPrefetch& prefetch) {
  __m512 lanes[R][Q];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 12
    for (int q = 0; q < Q; ++q) lanes[r][q] = _mm512_setzero_ps();
  const char* pf = prefetch.next;
  const char* const pf_end = prefetch.end;
  for (int64_t i = b; i < end; i += 8) {
    // One line per step: two or three measured slower at batch 8 (they compete with the demand
    // reads of this block's weights).
    if (pf < pf_end) {
      _mm_prefetch(pf, _MM_HINT_T1);
      pf += 64;
    }
    __m512 wv[Q];
#pragma GCC unroll 12
    for (int q = 0; q < Q; ++q) wv[q] = pairs(q, i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xv = LoadX8Twice(x + r * ldx, i);
#pragma GCC unroll 12
      for (int q = 0; q < Q; ++q) lanes[r][q] = _mm512_fmadd_ps(xv, wv[q], lanes[r][q]);
    }
  }
  prefetch.next = pf;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 12
    for (int q = 0; q < Q; ++q) FoldPair(lanes[r][q], acc + (r * acc_ld + 2 * q) * 4);
}

// R x-rows times `cols` w-rows: groups of kPairs weight-row pairs over all their k-blocks (each
// weight row streams whole, as in the AVX2 panel), then single pairs, then an odd last row
// paired with itself (its high half lands in a spare accumulator column). 8 rows: 3 pairs (24
// accumulators, 3 weight pairs and an x vector: 28 of the 32 registers); 4 rows: 4 pairs (16).
// kPaired: the weights are row-paired (weight_pairs.h): `w` starts at a pair (an even row), only
// the matrix's last tile can end in its odd last row (stored row-major), and k is a multiple of
// 8 (no scalar tail); 1-row (decode, memory-bound) tiles take 12 pairs at a time, 12 streams.
template <int R, DType D, bool kPaired>
BLOSSOM_AVX512 void Panel(const float* x, int64_t ldx, const void* w, int cols, int64_t k,
                          float* dots, int64_t ldd, WeightPrefetch* prefetch) {
  WeightPrefetch none;
  WeightPrefetch& pf = prefetch != nullptr ? *prefetch : none;
  constexpr int kPairs = R == 8 ? 3 : R == 4 ? 4 : 12;
  const int64_t k8 = k & ~int64_t{7};
  const int64_t row_bytes = k * ElemBytes(D);
  const char* wc = static_cast<const char*>(w);
  auto pairs_from = [&](int c) {
    if constexpr (kPaired) {
      return InterleavedPairs<D>{wc + c * row_bytes, 2 * row_bytes};
    } else {
      return RowPairs<D>{wc + c * row_bytes, static_cast<size_t>(row_bytes)};
    }
  };
  const int acc_ld = (cols + 1) & ~1;  // even, with the odd row's spare column
  alignas(64) double acc[R * (kMaxTileCols + 1) * 4];
  for (int i = 0; i < R * acc_ld * 4; ++i) acc[i] = 0.0;
  auto block_end = [k8](int64_t b) { return b + kDotBlock < k8 ? b + kDotBlock : k8; };
  int c = 0;
  for (; c + 2 * kPairs <= cols; c += 2 * kPairs)
    for (int64_t b = 0; b < k8; b += kDotBlock)
      TileBlock<R, kPairs, D>(x, ldx, pairs_from(c), b, block_end(b), acc + c * 4, acc_ld, pf);
  for (; c + 2 <= cols; c += 2)
    for (int64_t b = 0; b < k8; b += kDotBlock)
      TileBlock<R, 1, D>(x, ldx, pairs_from(c), b, block_end(b), acc + c * 4, acc_ld, pf);
  if (c < cols)
    for (int64_t b = 0; b < k8; b += kDotBlock)
      TileBlock<R, 1, D>(x, ldx, RowPairs<D>{wc + c * row_bytes, 0}, b, block_end(b), acc + c * 4,
                         acc_ld, pf);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < cols; ++j)
      dots[r * ldd + j] = FinishDot(acc + (r * acc_ld + j) * 4, x + r * ldx, wc + j * row_bytes,
                                    D, k8, k);
}

using PanelFn = void (*)(const float*, int64_t, const void*, int, int64_t, float*, int64_t,
                         WeightPrefetch*);

template <DType D>
PanelFn Pick(int rows, bool paired) {
  if (paired)
    return rows == 8 ? &Panel<8, D, true> : rows == 4 ? &Panel<4, D, true> : &Panel<1, D, true>;
  return rows == 8 ? &Panel<8, D, false> : &Panel<4, D, false>;
}

PanelFn PickFor(DType element, int rows, bool paired) {
  switch (element) {
    case DType::kBF16:
      return Pick<DType::kBF16>(rows, paired);
    case DType::kF16:
      return Pick<DType::kF16>(rows, paired);
    default:
      return Pick<DType::kF32>(rows, paired);
  }
}

}  // namespace

bool DotTileAvx512Supported() { return CpuHasAvx512(); }

void DotTileAvx512(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                   int64_t k, float* dots, int64_t ldd, WeightPrefetch* prefetch) {
  if (rows != 4 && rows != 8) {
    DotTileAvx2(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
    return;
  }
  PickFor(w_dtype, rows, /*paired=*/false)(x, ldx, w, cols, k, dots, ldd, prefetch);
}

void DotTileAvx512Pairs(const float* x, int64_t ldx, int rows, const void* w, DType element,
                        int cols, int64_t k, float* dots, int64_t ldd, WeightPrefetch* prefetch) {
  PickFor(element, rows, /*paired=*/true)(x, ldx, w, cols, k, dots, ldd, prefetch);
}

#else  // not x86-64: the portable path only.

bool DotTileAvx512Supported() { return false; }
void DotTileAvx512(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                   int64_t k, float* dots, int64_t ldd, WeightPrefetch* prefetch) {
  DotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}
void DotTileAvx512Pairs(const float* x, int64_t ldx, int rows, const void* w, DType element,
                        int cols, int64_t k, float* dots, int64_t ldd, WeightPrefetch*) {
  // The tile's rows are laid out as a row-paired [cols, k] matrix of their own (weight_pairs.h).
  std::vector<char> unpacked(DTypeBytes(element, cols * k));
  UnpackPairRows(w, element, cols, k, 0, cols, unpacked.data());
  DotTilePortable(x, ldx, rows, unpacked.data(), element, cols, k, dots, ldd);
}

#endif

}  // namespace blossom
