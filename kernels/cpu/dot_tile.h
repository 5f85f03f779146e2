// The GEMM's micro-kernels: a small tile of dot products between fp32 activation rows and weight
// rows, in one fixed operation order shared by every instruction-set path.
//
// The contract (what makes the CPU backend batch invariant and its ISA paths bit-identical): the
// dot product of an fp32 row x[0, k) and a weight row w[0, k) (F32, F16 or BF16, widened exactly)
// is accumulated in fp64:
//   lane[l] = fma(double(x[i + l]), double(w[i + l]), lane[l])   for i = 0, 4, 8, ... < k4
//                                (k4 = k rounded down to a multiple of 4), l = 0..3, from 0;
//   s = (lane0 + lane2) + (lane1 + lane3);
//   s = fma(double(x[i]), double(w[i]), s)                        for i = k4 .. k-1, in order;
//   result = float(s).
// The product of two fp32 values is exact in fp64, so an FMA and a multiply-then-add give the
// same bits: the AVX2 path uses FMA, the portable path multiplies and adds (no software fma).
// Every tile shape and every path computes each element exactly this way, so a result depends
// only on its two rows, never on the tile it landed in, the batch size or the thread count.
//
// Why fp64 lanes: a product of two fp32 values is exact in fp64, so the only rounding is in the
// sums and the final cast; the result is within about one fp32 ulp of the exact dot product.
// fp32 accumulation (tried: 8 fp32 FMA lanes) put the logits of the tensor-parallel golden test
// 1.09e-4 from transformers' against a 1e-4 bound, because its error adds to the oracle's own
// (~1e-4 from exact); fp64 keeps Blossom's error negligible next to the oracle's. With FMA and
// the weights widened in registers it still runs at memory speed for decode.
#ifndef BLOSSOM_KERNELS_CPU_DOT_TILE_H_
#define BLOSSOM_KERNELS_CPU_DOT_TILE_H_

#include <cmath>
#include <cstdint>

#include "kernels/dtype.h"

namespace blossom {

// Tile shapes (rows of x, rows of w) every path implements.
struct TileShape {
  int rows, cols;
};
constexpr TileShape kTileShapes[] = {{4, 3}, {4, 1}, {1, 8}, {1, 3}, {1, 1}};
constexpr int kMaxTileRows = 4;
constexpr int kMaxTileCols = 8;

// dots[r * ldd + c] = Dot(x + r * ldx, w row c) for r < rows, c < cols, where (rows, cols) is one
// of kTileShapes and w holds `cols` consecutive rows of k elements of `w_dtype`.
using DotTileFn = void (*)(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                           int cols, int64_t k, float* dots, int64_t ldd);

// Plain C++ (std::fma per lane): runs on any CPU; the reference the vector paths must match.
void DotTilePortable(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                     int64_t k, float* dots, int64_t ldd);
// AVX2 + FMA + F16C (x86-64 only; callers check DotTileAvx2Supported() first).
void DotTileAvx2(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                 int64_t k, float* dots, int64_t ldd);
bool DotTileAvx2Supported();

// The end of the contract, shared by every path: the fixed lane reduction, then the scalar tail.
inline float FinishDot(const double lanes[4], const float* x, const void* w, DType w_dtype,
                       int64_t k4, int64_t k) {
  double s = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
  // The product is exact in fp64, so this is the same single rounding as an FMA.
  for (int64_t i = k4; i < k; ++i)
    s += static_cast<double>(x[i]) * static_cast<double>(LoadAsFloat(w, w_dtype, i));
  return static_cast<float>(s);
}

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_DOT_TILE_H_
