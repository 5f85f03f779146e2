// Block quantization for the CPU backend's quantized Linear: the packed layouts of DType::kQ8G32
// and kQ4G32, packing a float weight at load time, and quantizing activation rows per call.
//
// Layout: a row of K elements (K a multiple of 32) is K / 32 consecutive blocks; a block is an
// fp32 scale followed by 32 codes, value[i] = scale * code[i].
// - Q8: 32 int8 codes, symmetric, scale = max|w| / 127, codes in [-127, 127]. -128 is never used,
//   so |code| fits the unsigned operand of vpmaddubsw and no product pair overflows int16.
// - Q4: 16 bytes; byte j holds code j in its low nibble and code j + 16 in its high one, each
//   stored as code + 8. Symmetric with no zero point: the scale maps the block's value of largest
//   magnitude to -8 (scale = that value / -8), so all 16 levels are used, and the dot product stays
//   a pure integer dot (a zero point would add a per-block x-sum term to every dot). Transformer
//   weight blocks are close to zero-mean, which is where a zero point buys little.
// Why groups of 32 (not per-channel): one outlier weight only coarsens its own 32 neighbours, and
// the scales cost 4 bytes per 32 weights (12.5% of int8, 25% of int4).
//
// Activations are quantized per call to Q8 blocks of the same shape (symmetric, per 32 elements
// of a row), so a dot product is an exact int32 dot per block times the two scales. Quantizing an
// x row depends only on that row: batch invariance holds.
//
// Thread-safe: pure functions.
#ifndef BLOSSOM_KERNELS_CPU_QUANT_H_
#define BLOSSOM_KERNELS_CPU_QUANT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace blossom {

constexpr int kQuantBlock = 32;

struct Q8Block {
  float scale;
  int8_t codes[kQuantBlock];
};
static_assert(sizeof(Q8Block) == 36, "Q8Block must be packed as DTypeBytes(kQ8G32) says");

struct Q4Block {
  float scale;
  uint8_t nibbles[kQuantBlock / 2];  // low: code j + 8, high: code j + 16 + 8
};
static_assert(sizeof(Q4Block) == 20, "Q4Block must be packed as DTypeBytes(kQ4G32) says");

// The panel layout of int8 weights (DType::kQ8G32Panel16), for the AVX512-VNNI GEMM
// (quant_panel_tile.h): rows in panels of 16; panel p's block b is the kQ8PanelBlockBytes at
// (p * blocks + b) * kQ8PanelBlockBytes, holding
//   bytes [64j + 4r, 64j + 4r + 4) = codes 4j .. 4j + 3 of row 16p + r, each as code + 128 (j < 8),
//   then the 16 rows' fp32 scales (bytes 512 .. 575).
// So one 64-byte load holds 4 consecutive codes of each of the 16 rows: the vpdpbusd operand
// whose 16 int32 lanes are the 16 rows' dots, with x's 4 codes broadcast; no horizontal sums.
// Codes are stored unsigned because vpdpbusd multiplies unsigned by signed bytes: the GEMM adds
// -128 * (x's block code sum) to the dot, exactly. A panel is 16 row-major rows' bytes (36 per
// 32 weights), and a panel's blocks are consecutive: one stream per 16 rows for the prefetcher.
constexpr int kQ8PanelRows = 16;
constexpr size_t kQ8PanelBlockBytes = 512 + kQ8PanelRows * sizeof(float);
static_assert(kQ8PanelBlockBytes == kQ8PanelRows * sizeof(Q8Block), "a panel is 16 rows' bytes");
// Byte of a panel block holding code i (< 32) of the panel's row r (< 16); the scales follow at
// byte 512.
constexpr int Q8PanelCodeOffset(int r, int i) { return 64 * (i / 4) + 4 * r + i % 4; }

// The panel layout of int4 weights (DType::kQ4G32Panel16), the same idea: panel p's block b is
// the kQ4PanelBlockBytes at (p * blocks + b) * kQ4PanelBlockBytes, holding
//   bytes [64j + 4r, 64j + 4r + 4) = nibble bytes 4j .. 4j + 3 of row 16p + r's Q4 block (j < 4;
//   byte i's low nibble is code i + 8, its high nibble code i + 16 + 8, as in Q4Block),
//   then the 16 rows' fp32 scales (bytes 256 .. 319).
// So one 64-byte load, masked to its low nibbles, is the vpdpbusd operand for codes 4j .. 4j + 3
// of the 16 rows, and shifted right by 4 the one for codes 16 + 4j ..: the GEMM adds -8 * (x's
// block code sum). 20 bytes per 32 weights, as kQ4G32.
constexpr int kQ4PanelRows = 16;
constexpr size_t kQ4PanelBlockBytes = 256 + kQ4PanelRows * sizeof(float);
static_assert(kQ4PanelBlockBytes == kQ4PanelRows * sizeof(Q4Block), "a panel is 16 rows' bytes");
// Byte of a panel block holding nibble byte j (< 16) of the panel's row r (< 16).
constexpr int Q4PanelByteOffset(int r, int j) { return 64 * (j / 4) + 4 * r + j % 4; }

// Quantizes `rows` rows of k elements of a float dtype (F32, F16, BF16) into `out_dtype`
// (kQ8G32 or kQ4G32: DTypeBytes(out_dtype, k) bytes per row; kQ8G32Panel16 / kQ4G32Panel16:
// `rows` a multiple of 16, written as rows / 16 panels of k / 32 blocks, the same bytes as the
// row-major dtype). The codes and scales are the row-major dtype's in every layout. InvalidArgument if k is not a multiple of 32, the rows
// do not fill whole panels, or the dtypes are wrong.
absl::Status QuantizeWeightRows(const void* w, DType w_dtype, int64_t rows, int64_t k,
                                DType out_dtype, void* out);

// Quantizes one fp32 row of k elements (k a multiple of 32) into k / 32 Q8 blocks; each block's
// scale is max|x| / 127, codes round to nearest even. The AVX2 path where the CPU has it, else the
// portable one: bit-identical (quant_test), so the choice never changes a result. Q8 weights
// are packed with the same function.
void QuantizeActivationRow(const float* x, int64_t k, Q8Block* out);
// The two paths, for tests (the AVX2 one needs CpuHasAvx2Fma(); off x86-64 it is the portable).
void QuantizeActivationRowPortable(const float* x, int64_t k, Q8Block* out);
void QuantizeActivationRowAvx2(const float* x, int64_t k, Q8Block* out);

// Repacks `rows` (a multiple of 16) row-major kQ8G32 rows of `blocks` blocks into panels, and
// back: the same blocks exactly.
void PackQ8Panels(const Q8Block* rows_in, int64_t rows, int64_t blocks, void* panels);
void UnpackQ8Panels(const void* panels, int64_t rows, int64_t blocks, Q8Block* rows_out);
// The same for kQ4G32 rows and kQ4G32Panel16 panels.
void PackQ4Panels(const Q4Block* rows_in, int64_t rows, int64_t blocks, void* panels);
void UnpackQ4Panels(const void* panels, int64_t rows, int64_t blocks, Q4Block* rows_out);

// Element i of a quantized row, as fp32 (tests and reference computations).
float DequantizeAt(const void* row, DType dtype, int64_t i);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_QUANT_H_
