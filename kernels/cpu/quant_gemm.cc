#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_amx.h"
#include "kernels/cpu/quant_dot_tile.h"
#include "kernels/cpu/quant_panel_tile.h"
#include "kernels/cpu/tiled_gemm.h"

namespace blossom {
namespace {

// x elements below which a chunk of rows to quantize is not worth another thread.
constexpr int64_t kMinQuantizeElems = 64 * 1024;

// Panel-packed int8 or int4 weights (quant_panel_tile.h): tiles of 8 x rows, then 4, then one at a time,
// each against a whole panel of 16 weight rows; `xq` holds the quantized x rows and `x_bias`
// their QuantPanelXBias.
void PanelGemm(const GemmArgs& a, ThreadPool* pool, bool vector_path, const Q8Block* xq, const int32_t* x_bias) {
  const int64_t blocks = a.k / kQuantBlock;
  const bool q4 = a.w_dtype == DType::kQ4G32Panel16;
  const bool vnni = vector_path && QuantPanelTileAvx512VnniUsable();
  const QuantPanelTileFn tile = q4 ? (vnni ? &QuantQ4PanelTileAvx512Vnni : &QuantQ4PanelTilePortable)
                                   : (vnni ? &QuantPanelTileAvx512Vnni : &QuantPanelTilePortable);
  GemmTiling tiling;
  tiling.decode_cols = kQ8PanelRows;
  tiling.prefill_rows = 8;
  tiling.prefill_rows_small = 4;
  tiling.prefill_cols = kQ8PanelRows;
  tiling.max_cols = kQ8PanelRows;
  tiling.w_row_bytes = DTypeBytes(a.w_dtype, a.k);
  const char* w_base = static_cast<const char*>(a.w);
  // Columns come in whole panels: n is a multiple of 16 and RunTiledGemm's column blocks and
  // thread chunks are multiples of the tile width, so n0 starts a panel and cols is 16.
  RunTiledGemm(a, pool, vector_path, tiling, [&](int64_t m0, int rows, int64_t n0, int, float* dots,
                                                 WeightPrefetch*) {
    tile(xq + m0 * blocks, x_bias + m0 * blocks, blocks, rows, w_base + n0 * tiling.w_row_bytes, blocks, dots,
         tiling.max_cols);
  });
}

}  // namespace

static_assert(kQuantMaxTileRows * kQuantMaxTileCols <= kMaxTiledGemmDots &&
                  2 * kAmxTileRows * kAmxTileRows <= kMaxTiledGemmDots,
              "RunTiledGemm's dots scratch must hold the largest quantized tile");

void QuantGemmNT(const GemmArgs& a, ThreadPool* pool, GemmIsa isa) {
  if (a.m <= 0 || a.n <= 0) return;
  if (isa == GemmIsa::kAuto) isa = BestGemmIsa();
  const bool avx2 = (isa == GemmIsa::kAvx2 || isa == GemmIsa::kAvx512) && CpuHasAvx2Fma();
  // kAvx2 and kAvx512 mean the fastest x86 integer dot this CPU has (VNNI where present): every path
  // gives the same bits, so the choice never changes a result.
  const QuantDotTileFn tile = avx2 ? BestQuantDotTileX86() : &QuantDotTilePortable;
  const int64_t blocks = a.k / kQuantBlock;
  // AMX (int8 weights, from 4 rows: batched decode steps as well as prefill): 16 x rows by 16
  // weight rows per tile. M is padded to a multiple of 16 with zero rows, whose results go to a
  // scratch output and are dropped; a padded tile still does far less work per pair than the
  // 4 x 2 one. Which tile computes a row never changes its bits (quant_amx.h).
  const bool amx = avx2 && a.w_dtype == DType::kQ8G32 && a.m >= kQuantMaxTileRows &&
                   AmxInt8Usable();
  const int64_t m_run = amx ? (a.m + kAmxTileRows - 1) / kAmxTileRows * kAmxTileRows : a.m;

  thread_local std::vector<Q8Block> x_codes;
  x_codes.resize(static_cast<size_t>(m_run * blocks));
  Q8Block* xq = x_codes.data();
  std::fill(xq + a.m * blocks, xq + m_run * blocks, Q8Block{});  // padded rows: zero codes
  // Panel weights also need each x block's code sum (quant_panel_tile.h), taken here while the
  // row's codes are in cache and across the pool. (A buffer the pool's threads reach through a
  // pointer: naming a thread_local in the lambda would name each worker's own, empty one.)
  const bool panels = a.w_dtype == DType::kQ8G32Panel16 || a.w_dtype == DType::kQ4G32Panel16;
  const int32_t code_offset = a.w_dtype == DType::kQ4G32Panel16 ? kQ4PanelCodeOffset : kQ8PanelCodeOffset;
  thread_local std::vector<int32_t> x_bias_buffer;
  if (panels) x_bias_buffer.resize(static_cast<size_t>(a.m * blocks));
  int32_t* x_bias = x_bias_buffer.data();
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      QuantizeActivationRow(a.x + r * a.k, a.k, xq + r * blocks);
      if (panels) QuantPanelXBias(xq + r * blocks, blocks, code_offset, x_bias + r * blocks);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(a.m, std::max<int64_t>(1, kMinQuantizeElems / std::max<int64_t>(1, a.k)),
                      quantize_rows);
  } else {
    quantize_rows(0, a.m);
  }

  if (panels) {
    PanelGemm(a, pool, avx2, xq, x_bias);
    return;
  }

  // Decode: one x row against 4 weight rows; prefill: 4 x rows against 2 (8 accumulators, the
  // weight codes and their absolute values fit the 16 AVX2 registers), or with AMX 16 by 16.
  // Shapes never change a result (quant_dot_tile.h).
  GemmArgs run = a;
  thread_local std::vector<float> padded_out;
  if (m_run != a.m) {
    padded_out.resize(static_cast<size_t>(m_run * a.n));
    run.out = padded_out.data();
    run.m = m_run;
  }
  GemmTiling tiling;
  tiling.decode_cols = 4;
  // AMX: 32-row tiles (two x groups per weight tile) where M has them, then 16-row ones.
  const bool amx32 = amx && m_run >= 2 * kAmxTileRows;
  tiling.prefill_rows = amx32 ? 2 * kAmxTileRows : amx ? kAmxTileRows : kQuantMaxTileRows;
  if (amx32) tiling.prefill_rows_small = kAmxTileRows;
  tiling.prefill_cols = amx ? kAmxTileRows : 2;
  tiling.max_cols = amx ? kAmxTileRows : kQuantMaxTileCols;
  tiling.w_row_bytes = DTypeBytes(a.w_dtype, a.k);
  const char* w_base = static_cast<const char*>(a.w);

  // AMX: the x rows of each 16-row group (padded rows zero), repacked for the B tile (quant_amx.h).
  // (The tile lambda runs on the pool's threads: it must see this thread's buffers through
  // pointers, since naming a thread_local there would name the worker's own, empty one.)
  thread_local std::vector<int8_t> amx_codes_buffer;
  thread_local std::vector<float> amx_scales_buffer;
  int8_t* amx_codes = nullptr;
  float* amx_scales = nullptr;
  if (amx) {
    const int64_t groups = m_run / kAmxTileRows;
    amx_codes_buffer.resize(static_cast<size_t>(groups * blocks * kAmxXBlockBytes));
    amx_scales_buffer.resize(static_cast<size_t>(groups * blocks * kAmxTileRows));
    amx_codes = amx_codes_buffer.data();
    amx_scales = amx_scales_buffer.data();
    // Groups are independent: across the pool (done on the calling thread alone, the other
    // threads waited through 1.6% of a 512-token int8 prefill).
    auto pack_groups = [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g)
        PackAmxX(xq + g * kAmxTileRows * blocks, blocks, kAmxTileRows, blocks,
                 amx_codes + g * blocks * kAmxXBlockBytes, amx_scales + g * blocks * kAmxTileRows);
    };
    if (pool != nullptr) {
      pool->ParallelFor(groups, 1, pack_groups);
    } else {
      pack_groups(0, groups);
    }
  }
  // Up to 64 rows (at most two tiles per column block) the AMX tiles prefetch their weight rows
  // (quant_amx.h): those come from DRAM; with more, from L2 after the first tile.
  const bool prefetch_amx_weights = m_run <= 2 * 2 * kAmxTileRows;
  RunTiledGemm(run, pool, avx2, tiling, [&](int64_t m0, int rows, int64_t n0, int cols, float* dots,
                                            WeightPrefetch*) {
    if (amx && (rows == kAmxTileRows || rows == 2 * kAmxTileRows) && cols == kAmxTileRows) {
      const int64_t g = m0 / kAmxTileRows;  // m0 is a multiple of 16 for these tiles
      (rows == kAmxTileRows ? AmxQ8Tile16x16 : AmxQ8Tile32x16)(
          amx_codes + g * blocks * kAmxXBlockBytes, amx_scales + g * blocks * kAmxTileRows,
          w_base + n0 * tiling.w_row_bytes, tiling.w_row_bytes, blocks, dots, tiling.max_cols,
          prefetch_amx_weights);
      return;
    }
    if (!amx) {
      tile(xq + m0 * blocks, blocks, rows, w_base + n0 * tiling.w_row_bytes, a.w_dtype, cols, a.k,
           dots, tiling.max_cols);
      return;
    }
    // AMX tiling (every row in a 16-row tile, M being padded), a 16-row tile with fewer than 16
    // columns (those left over): 4 x 2 and 4 x 1 tiles.
    for (int r = 0; r < rows; r += kQuantMaxTileRows)
      for (int c = 0; c < cols;) {
        const int width = cols - c >= 2 ? 2 : 1;
        tile(xq + (m0 + r) * blocks, blocks, kQuantMaxTileRows,
             w_base + (n0 + c) * tiling.w_row_bytes, a.w_dtype, width, a.k,
             dots + r * tiling.max_cols + c, tiling.max_cols);
        c += width;
      }
  });
  if (run.out != a.out)
    std::copy(run.out, run.out + a.m * a.n, a.out);  // the real rows; padded ones are dropped
}

}  // namespace blossom
