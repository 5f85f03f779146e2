// Micro-kernels of the bf16-activation GEMM (--quantize bf16) over panel-packed bf16 weights
// (DType::kBF16Panel16): `rows` x rows (bf16) by `panels` panels of 16 weight rows.
//
// Why: the default contract (dot_tile.h) keeps activations in fp32 and widens 16-bit weights to
// fp32 for fp32 FMAs: a bf16 checkpoint then runs exactly as fast as an fp32 one once compute
// bound (prefill, batches), and its decode spends instructions on the widening. transformers and
// llama.cpp run a bf16 model with bf16 activations; AVX512-BF16's vdpbf16ps (Cooper Lake,
// Sapphire Rapids, Zen 4) multiplies 32 bf16 pairs per instruction into 16 fp32 sums: twice the
// multiply-adds of an fp32 FMA. This mode rounds each GEMM's x rows to bf16 and uses it.
//
// The layout: panel p holds weight rows 16p .. 16p + 15 (the last one padded with zero rows); its element pair j (elements 2j, 2j + 1)
// of those 16 rows is one 64-byte line, row c's two elements at 2-byte offsets 4c and 4c + 2. So
// one load is a vdpbf16ps operand for 16 rows, x's pair j is broadcast to all 16 lanes, and each
// lane accumulates one output: no horizontal sums. Panels are consecutive, 32k bytes each: one
// stream per panel for the prefetcher.
//
// The contract (every path, tile and batch gives the same bits; a row's output never depends on
// its batch): x is rounded to bf16 by RoundRowsToBf16 (nearest even; subnormals to signed zero, as
// vdpbf16ps reads them anyway). Then for each output, with acc = +0.0f and j = 0 .. k/2 - 1:
//   acc = FTZ(fmaf(x[2j + 1], w[2j + 1], acc));  acc = FTZ(fmaf(x[2j], w[2j], acc));
// where FTZ flushes a subnormal result to zero of its sign (the products of two bf16 values are
// exact in fp32, so each step is one rounding of acc + product). That is vdpbf16ps's definition
// (Intel SDM: odd element first, DAZ in, FTZ out, round to nearest even), which an AMD Zen 4
// matches bit for bit (bf16_panel_tile_test checks it on every CPU that has the instruction).
// Weights are packed with subnormals flushed (PackBf16Panels), so DAZ never changes a weight.
// The output is acc: fp32 accumulation over all of k, as transformers' bf16 matmul and llama.cpp
// do. Its rounding error is ~1000x below what rounding x to bf16 already costs (a random walk of
// k/2 fp32 roundings, sqrt(k) u32 |x||w|, against sqrt(k) u16 |x||w|, u16 / u32 = 2^15).
//
// Thread-safe: pure functions.
#ifndef BLOSSOM_KERNELS_CPU_BF16_PANEL_TILE_H_
#define BLOSSOM_KERNELS_CPU_BF16_PANEL_TILE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace blossom {

constexpr int kBf16PanelRows = 16;
// Most panels one tile takes (a decode tile: 8 panels, 128 outputs, 8 accumulation chains).
constexpr int kBf16MaxTilePanels = 8;

// The element of a panel-packed [n, k] matrix holding weight (row, i): its index in uint16 units.
inline int64_t Bf16PanelIndex(int64_t row, int64_t i, int64_t k) {
  return (row / kBf16PanelRows) * kBf16PanelRows * k + (i / 2) * (2 * kBf16PanelRows) +
         (row % kBf16PanelRows) * 2 + (i % 2);
}

// x rounded to bf16 the contract's way: nearest even, a subnormal to a zero of its sign, a NaN to
// a quiet NaN. n elements from x to out (AVX-512 where the CPU has it: the same bits).
void RoundRowsToBf16(const float* x, int64_t n, uint16_t* out);
// The same in plain C++ (the reference the vector path must match).
void RoundRowsToBf16Portable(const float* x, int64_t n, uint16_t* out);

// Bytes of an [n, k] kBF16Panel16 matrix: n padded with zero rows to whole panels (the tiles read
// whole panels; the GEMM stores only the n real outputs).
inline size_t Bf16PanelStorageBytes(int64_t n, int64_t k) {
  return static_cast<size_t>((n + kBf16PanelRows - 1) / kBf16PanelRows) * kBf16PanelRows * k * 2;
}

// Packs rows [row_begin, row_end) of a row-major [n, k] F32, F16 or BF16 matrix `src` into the
// panels of `dst` (the whole [n, k] kBF16Panel16 matrix, Bf16PanelStorageBytes big), rounding to
// bf16 (nearest even) and flushing subnormals to zero; the range ending at n also writes the
// last panel's padding rows (zeros). InvalidArgument if row_begin is not a multiple of 16,
// row_end neither a multiple of 16 nor n, k is odd, or src_dtype is not a float dtype.
absl::Status PackBf16Panels(const void* src, DType src_dtype, int64_t n, int64_t k,
                            int64_t row_begin, int64_t row_end, void* dst);
// Rows [row_begin, row_end) of a kBF16Panel16 matrix with row length k back as row-major bf16.
void UnpackBf16PanelRows(const void* panels, int64_t k, int64_t row_begin, int64_t row_end,
                         uint16_t* out);

// dots[r * ldd + 16 p + c] = Dot(x row r, row c of panel p) for r < rows, p < panels, c < 16,
// where x holds `rows` bf16 rows ldx apart, `w` points at the first of `panels` consecutive
// panels of a matrix with row length k (even), 1 <= rows <= 8 and 1 <= panels <=
// kBf16MaxTilePanels.
using Bf16PanelTileFn = void (*)(const uint16_t* x, int64_t ldx, int rows, const void* w,
                                 int panels, int64_t k, float* dots, int64_t ldd);

// Plain C++: any CPU (the reference; slow: the GEMM runs it only where the CPU has no AVX512-BF16).
void Bf16PanelTilePortable(const uint16_t* x, int64_t ldx, int rows, const void* w, int panels,
                           int64_t k, float* dots, int64_t ldd);
// AVX512-BF16 (x86-64; callers check Bf16PanelTileAvx512Usable()).
void Bf16PanelTileAvx512(const uint16_t* x, int64_t ldx, int rows, const void* w, int panels,
                         int64_t k, float* dots, int64_t ldd);
// Whether this CPU runs the AVX512-BF16 tile (AVX-512 F/VL/DQ/BW and AVX512-BF16).
bool Bf16PanelTileAvx512Usable();

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_BF16_PANEL_TILE_H_
