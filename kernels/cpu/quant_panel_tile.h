// Micro-kernels of the quantized GEMM over panel-packed int8 and int4 weights
// (DType::kQ8G32Panel16, kQ4G32Panel16; layouts in quant.h): `rows` x rows (1, 4 or 8) by one
// panel's 16 weight rows.
//
// Why a second int8 layout: on a CPU with AVX512-VNNI but no AMX (AMD Zen 4, Intel Ice Lake and
// Cascade Lake) the row-major tiles (quant_dot_tile.h) form each pair's block dot in a 256-bit
// register and then sum its 8 lanes horizontally; with 4 rows per tile they ran a 2-core Zen 4 at
// ~10 multiply-adds per cycle per core, and the LM head's decode GEMV at 12-14 GB/s of the ~30 the
// memory gives (benchmarks/results/2026-11-27-cpu-560m-peers.md: int8 prefill at 0.4-0.5x of
// CTranslate2's speed, decode at 1.85x the weight-read floor). In the panel layout one 64-byte
// load holds 4 codes of each of 16 weight rows, so a vpdpbusd with 4 x codes broadcast adds 4
// products to each of the 16 rows' dots at once: 8 of them finish a block for 16 pairs, with no
// horizontal sum, and the fp32 steps run 16 pairs per instruction.
//
// The contract is quant_dot_tile.h's, to the bit: per pair and block the exact int32 dot (the
// stored unsigned code + 128 times x, plus -128 times x's block code sum, x_bias: exact), then
// d = x.scale * w.scale, acc = acc + float(dot) * d. So every path, tile and layout gives the
// same result for a pair, and a row's output never depends on the batch.
//
// Thread-safe: pure functions.
#ifndef BLOSSOM_KERNELS_CPU_QUANT_PANEL_TILE_H_
#define BLOSSOM_KERNELS_CPU_QUANT_PANEL_TILE_H_

#include <cstdint>

#include "kernels/cpu/quant.h"

namespace blossom {

// dots[r * ldd + c] = Dot(x row r, weight row 16p + c) for r < rows, c < 16, where `panel` is
// panel p (k / 32 = `blocks` blocks), x holds `rows` rows of Q8 blocks ldx apart and x_bias the
// matching -128 * code sums (QuantPanelXBias), ldx apart too. rows is 1, 4 or 8.
using QuantPanelTileFn = void (*)(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                                  const void* panel, int64_t blocks, float* dots, int64_t ldd);

// Plain C++: any CPU (the reference, and the path when another isa is asked for).
void QuantPanelTilePortable(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                            const void* panel, int64_t blocks, float* dots, int64_t ldd);
// AVX512-VNNI (x86-64; callers check QuantPanelTileAvx512VnniUsable()).
void QuantPanelTileAvx512Vnni(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                              const void* panel, int64_t blocks, float* dots, int64_t ldd);
// Whether this CPU runs the AVX512-VNNI tile (AVX-512 F/VL/DQ/BW and AVX512-VNNI).
bool QuantPanelTileAvx512VnniUsable();

// The same over int4 panels (DType::kQ4G32Panel16): `panel` is one int4 panel, x_bias the
// matching -8 * code sums (QuantPanelXBias with kQ4PanelCodeOffset). Unpacking the nibbles to
// bytes costs two instructions per 64-byte vector, shared by the tile's rows.
void QuantQ4PanelTilePortable(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                              const void* panel, int64_t blocks, float* dots, int64_t ldd);
void QuantQ4PanelTileAvx512Vnni(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                                const void* panel, int64_t blocks, float* dots, int64_t ldd);

// What the panels store on top of each code (vpdpbusd's weight operand is unsigned).
constexpr int32_t kQ8PanelCodeOffset = 128;
constexpr int32_t kQ4PanelCodeOffset = 8;

// x_bias[b] = -code_offset * (sum of block b's 32 codes), for `blocks` blocks of one x row: what
// turns the panel's (code + code_offset) dots into the codes' dots, exactly.
void QuantPanelXBias(const Q8Block* x, int64_t blocks, int32_t code_offset, int32_t* x_bias);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_QUANT_PANEL_TILE_H_
