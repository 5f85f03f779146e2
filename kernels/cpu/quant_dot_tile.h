// Micro-kernels of the quantized GEMM: a small tile of dot products between Q8 activation rows
// and Q8 or Q4 weight rows (layouts in quant.h), in one fixed operation order on every path.
//
// The contract (batch invariance and bit-identical paths): for a row pair with k / 32 blocks,
//   acc = 0; for each block b, in order:
//     dot = sum over i < 32 of xcode[32b + i] * wcode[32b + i]     (exact int32, |dot| < 2^24)
//     d = x.scale[b] * w.scale[b]                                   (fp32, rounded)
//     acc = acc + float(dot) * d        (fp32 multiply, then fp32 add: two roundings)
//   result = acc.
// The integer part is exact (and float(dot) too), so only the fp32 steps need a fixed order; they
// are a multiply and an add (not an FMA) so the portable path needs no fma and matches the AVX2
// one bit for bit. One chain per pair (not per SIMD lane) so the vector path can reduce each
// block's products to one int32 and run the fp32 steps of 8 pairs in one register: on AVX2 that
// halves the instructions per block of the 4 x 2 tile. Every tile shape computes every element
// exactly so: a row's result never depends on the tile, the batch size or the thread count.
//
// fp32 accumulation is enough here: the quantization error (~1e-2 relative for int8 codes) is
// orders of magnitude above the fp32 rounding of k / 32 additions (one chain: ~k / 32 * 6e-8
// relative at worst).
#ifndef BLOSSOM_KERNELS_CPU_QUANT_DOT_TILE_H_
#define BLOSSOM_KERNELS_CPU_QUANT_DOT_TILE_H_

#include <cstdint>

#include "kernels/cpu/quant.h"
#include "kernels/dtype.h"

namespace blossom {

// Tile shapes (rows of x, rows of w) every path implements.
struct QuantTileShape {
  int rows, cols;
};
constexpr QuantTileShape kQuantTileShapes[] = {{4, 2}, {4, 1}, {1, 4}, {1, 1}};
constexpr int kQuantMaxTileRows = 4;
constexpr int kQuantMaxTileCols = 4;

// dots[r * ldd + c] = Dot(x row r, w row c) for r < rows, c < cols ((rows, cols) one of
// kQuantTileShapes). x holds `rows` rows of k / 32 Q8 blocks, ldx blocks apart; w holds `cols`
// consecutive rows of k elements of w_dtype (kQ8G32 or kQ4G32).
using QuantDotTileFn = void (*)(const Q8Block* x, int64_t ldx, int rows, const void* w,
                                DType w_dtype, int cols, int64_t k, float* dots, int64_t ldd);

// Plain C++: runs on any CPU; the reference the vector path must match bit for bit.
void QuantDotTilePortable(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                          int cols, int64_t k, float* dots, int64_t ldd);
// AVX2 (vpmaddubsw / vpmaddwd; x86-64 only; callers check CpuHasAvx2Fma() first).
void QuantDotTileAvx2(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                      int cols, int64_t k, float* dots, int64_t ldd);
// AVX2 tiles with vpdpbusd for the integer products: AVX-VNNI (callers check CpuHasAvxVnni())
// and AVX512-VNNI + AVX512VL (CpuHasAvx512Vnni()).
void QuantDotTileAvxVnni(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                         int cols, int64_t k, float* dots, int64_t ldd);
void QuantDotTileAvx512Vnni(const Q8Block* x, int64_t ldx, int rows, const void* w,
                            DType w_dtype, int cols, int64_t k, float* dots, int64_t ldd);
// The fastest x86 tile this CPU runs: AVX-VNNI, else AVX512-VNNI, else AVX2. Callers check
// CpuHasAvx2Fma() first (both VNNI paths imply it).
QuantDotTileFn BestQuantDotTileX86();

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_QUANT_DOT_TILE_H_
