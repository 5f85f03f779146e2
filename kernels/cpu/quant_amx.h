// AMX int8 tiles for the quantized GEMM (q8g32 weights) on CPUs with Intel AMX (Sapphire Rapids
// and later): one TDPBSSD computes a whole block's (32 codes) exact int32 dots for 16 weight rows
// by 16 x rows, and the fp32 steps of those 256 pairs then run 16 lanes at a time. The contract
// is quant_dot_tile.h's, unchanged (per block: exact int32 dot, d = x.scale * w.scale rounded,
// acc = acc + float(dot) * d), so results are bit-identical to every other path.
//
// Layouts: the weight rows are used in place (q8g32: per block an fp32 scale then 32 codes, so a
// block of 16 consecutive rows is an AMX A tile of 16 rows x 32 bytes with the row stride). The x
// rows, quantized per call, are repacked per 16-row group into the B tile's layout (per block, 8
// rows of 64 bytes: row g holds bytes 4g..4g+3 of each of the 16 x rows) with their scales.
//
// Thread-safe: each call configures the calling thread's tiles and releases them.
#ifndef BLOSSOM_KERNELS_CPU_QUANT_AMX_H_
#define BLOSSOM_KERNELS_CPU_QUANT_AMX_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/quant.h"

namespace blossom {

constexpr int kAmxTileRows = 16;  // x rows and weight rows per AMX tile
// Bytes of one block of a packed 16-row x group: 32 codes of each of 16 rows.
constexpr int64_t kAmxXBlockBytes = kAmxTileRows * kQuantBlock;

// Whether this process can run the AMX tiles: the CPU has AMX-TILE and AMX-INT8, the OS enables
// their state, and it granted this process the tile data (asked once, on the first call).
bool AmxInt8Usable();

// Packs x rows [0, rows) (rows <= 16, ldx blocks apart; rows past `rows` are zeros) of `blocks`
// Q8 blocks each: codes[b * kAmxXBlockBytes ...] in the B tile layout, scales[b * 16 + r].
void PackAmxX(const Q8Block* x, int64_t ldx, int rows, int64_t blocks, int8_t* codes,
              float* scales);

// dots[r * ldd + c] = the quant_dot_tile.h dot of packed x row r (r < 16) and q8g32 weight row c
// (c < 16, rows row_bytes apart from w), for `blocks` blocks. Callers check AmxInt8Usable()
// (elsewhere this runs Q8Tile16x16Scalar). With `prefetch_weights`, each step prefetches the
// weight rows' block 8 blocks on into L1 (then the first blocks of the 16 rows after them): worth
// it when the weights come from DRAM, i.e. when few tiles share a column block (small batches);
// a hint only.
void AmxQ8Tile16x16(const int8_t* x_codes, const float* x_scales, const void* w, size_t row_bytes,
                    int64_t blocks, float* dots, int64_t ldd, bool prefetch_weights = false);
// Two consecutive packed 16-row x groups (the second `blocks` blocks after the first, as
// quant_gemm packs them) by the same 16 weight rows: dots rows 0..31. Same bits as two
// AmxQ8Tile16x16 calls; each weight tile is loaded once for both groups.
void AmxQ8Tile32x16(const int8_t* x_codes, const float* x_scales, const void* w, size_t row_bytes,
                    int64_t blocks, float* dots, int64_t ldd, bool prefetch_weights = false);
// The same in plain C++ from the packed layout: the reference for tests, any CPU.
void Q8Tile16x16Scalar(const int8_t* x_codes, const float* x_scales, const void* w,
                       size_t row_bytes, int64_t blocks, float* dots, int64_t ldd);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_QUANT_AMX_H_
