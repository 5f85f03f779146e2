// The GEMM's micro-kernels: a small tile of dot products between fp32 activation rows and weight
// rows, in one fixed operation order shared by every instruction-set path.
//
// The contract (what makes the CPU backend batch invariant and its ISA paths bit-identical): the
// dot product of an fp32 row x[0, k) and a weight row w[0, k) (F32, F16 or BF16, widened exactly
// to fp32) is computed as
//   k8 = k rounded down to a multiple of 8; the range [0, k8) is cut into blocks of kDotBlock
//   elements from 0 (the last one may be shorter);
//   per block:  lane[l] = 0, then lane[l] = fmaf(x[i + l], w[i + l], lane[l])   (fp32 FMA)
//                                         for i = block start, +8, ... < block end, l = 0..7;
//               acc[l] += double(lane[l]) + double(lane[l + 4])               l = 0..3, in fp64;
//   s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
//   s = s + double(x[i]) * double(w[i])     for i = k8 .. k-1, in order (the product is exact);
//   result = float(s).
// Every tile shape and every path computes each element exactly this way, so a result depends
// only on its two rows, never on the tile it landed in, the batch size or the thread count. The
// portable path uses std::fma on floats (correctly rounded in software where the CPU has no FMA).
//
// Why this order: the inner loop is plain fp32 FMA (8 lanes per AVX2 register, the CPU's full
// FMA rate, no widening), and each lane sums only kDotBlock / 8 = 128 products before its partial
// sum moves into fp64, so rounding error grows with 128 terms rather than with k. The oracle
// (transformers' fp32 GEMM) accumulates each output over all of k in fp32; Blossom stays closer
// to an fp64 evaluation than it does (bloom_model_test and tensor_parallel_test check that on
// every golden model; benchmarks/cpu/dot_block_error.py measures 2-3x less error than torch's
// fp32 matmul at bloom-560m's k = 1024 and 4096). The previous contract accumulated every product
// in fp64 lanes: twice the FMAs and a widening per element, for an accuracy the golden tests did
// not need. Blocks were 256 elements until 2026-11-25: each block's fold into fp64 costs about
// as many instructions as 8 of its FMA steps, and 1024 made the AVX-512 GEMM 1.08-1.14x faster.
#ifndef BLOSSOM_KERNELS_CPU_DOT_TILE_H_
#define BLOSSOM_KERNELS_CPU_DOT_TILE_H_

#include <cmath>
#include <cstdint>

#include "kernels/dtype.h"

namespace blossom {

// A tile is 1, 4 or kMaxTileRows (8) rows of x against 1 to kMaxTileCols consecutive rows of w.
// 8-row tiles are the AVX-512 kernel's (each paired weight vector read from cache feeds 8 rows);
// the other paths run them as two 4-row tiles.
constexpr int kMaxTileRows = 8;
constexpr int kMaxTileCols = 96;
// Shapes the tests cover: the GEMM's decode tiles (1 x 8, 3, 1) and prefill panels (4 or 8 x any).
struct TileShape {
  int rows, cols;
};
constexpr TileShape kTileShapes[] = {{4, 3}, {4, 1}, {4, 7}, {4, 48}, {4, kMaxTileCols},
                                     {8, 6}, {8, 13}, {8, 48}, {8, kMaxTileCols},
                                     {1, 8}, {1, 3}, {1, 1}, {1, 13}};

// dots[r * ldd + c] = Dot(x + r * ldx, w row c) for r < rows, c < cols, where rows is 1, 4 or
// kMaxTileRows, 1 <= cols <= kMaxTileCols, and w holds `cols` consecutive rows of k elements of
// `w_dtype`.
using DotTileFn = void (*)(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                           int cols, int64_t k, float* dots, int64_t ldd);

// Plain C++ (std::fma per lane): runs on any CPU; the reference the vector paths must match.
void DotTilePortable(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                     int64_t k, float* dots, int64_t ldd);
// AVX2 + FMA + F16C (x86-64 only; callers check DotTileAvx2Supported() first).
void DotTileAvx2(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                 int64_t k, float* dots, int64_t ldd);
bool DotTileAvx2Supported();
// Weights a tile prefetches into L2 while it computes: one 64-byte line from `next` per inner
// step (8 elements of k), advancing `next` until it reaches `end`. The GEMM points it at the
// column block it runs next when the batch is small, so that block's read from DRAM overlaps this
// block's FMAs instead of stalling the first x rows that touch it. A hint only: results never
// depend on it.
struct WeightPrefetch {
  const char* next = nullptr;
  const char* end = nullptr;
};

// AVX-512 (F, VL, DQ, BW) for 4- and 8-row tiles, two elements per 512-bit register; 1-row tiles
// run the AVX2 kernels (x86-64 only; callers check DotTileAvx512Supported() first). `prefetch`
// (may be null) is consumed by the 4- and 8-row tiles.
void DotTileAvx512(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                   int64_t k, float* dots, int64_t ldd, WeightPrefetch* prefetch = nullptr);
bool DotTileAvx512Supported();

// The AVX-512 tiles over row-paired weights (weight_pairs.h) of element dtype `element` (F32, F16
// or BF16): `w` is the start of a pair (an even row), the tile's `cols` weight rows are whole
// pairs except that the last may be the matrix's odd last row, and k is a multiple of 8. rows is
// 1, 4 or kMaxTileRows. The same contract, so the same bits as the row-major tiles.
void DotTileAvx512Pairs(const float* x, int64_t ldx, int rows, const void* w, DType element,
                        int cols, int64_t k, float* dots, int64_t ldd,
                        WeightPrefetch* prefetch = nullptr);

// Elements per fp32 block before the lanes move into fp64 (a multiple of 8).
constexpr int64_t kDotBlock = 1024;

// The end of the contract, shared by every path: the fixed reduction of the fp64 accumulators,
// then the scalar tail k8 .. k-1.
inline float FinishDot(const double acc[4], const float* x, const void* w, DType w_dtype,
                       int64_t k8, int64_t k) {
  double s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
  // The product is exact in fp64, so this is the same single rounding as an FMA.
  for (int64_t i = k8; i < k; ++i)
    s += static_cast<double>(x[i]) * static_cast<double>(LoadAsFloat(w, w_dtype, i));
  return static_cast<float>(s);
}

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_DOT_TILE_H_
