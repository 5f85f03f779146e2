#include "kernels/cpu/bf16_panel_gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/bf16_panel_tile.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/tiled_gemm.h"

namespace blossom {
namespace {

// x elements below which a chunk of rows to round is not worth another thread.
constexpr int64_t kMinRoundElems = 64 * 1024;
// Tile widths in outputs (bf16_panel_tile.cc): 3 panels for 8- and 4-row tiles, 8 for one row.
constexpr int kPrefillCols = 3 * kBf16PanelRows;
constexpr int kDecodeCols = kBf16MaxTilePanels * kBf16PanelRows;

}  // namespace

static_assert(8 * kDecodeCols <= kMaxTiledGemmDots,
              "RunTiledGemm's dots scratch must hold 8 rows at the decode tile's width");

void Bf16PanelGemmNT(const GemmArgs& a, ThreadPool* pool, GemmIsa isa) {
  if (a.m <= 0 || a.n <= 0) return;
  if (isa == GemmIsa::kAuto) isa = BestGemmIsa();
  const bool vector_path = isa != GemmIsa::kPortable && Bf16PanelTileAvx512Usable();
  const Bf16PanelTileFn tile = vector_path ? &Bf16PanelTileAvx512 : &Bf16PanelTilePortable;

  GemmTiling tiling;
  tiling.w_row_bytes = static_cast<size_t>(a.k) * 2;
  tiling.decode_cols = kDecodeCols;
  tiling.decode_any_cols = true;
  tiling.prefill_rows = 8;
  tiling.prefill_rows_small = 4;
  tiling.prefill_cols = kPrefillCols;
  tiling.prefill_any_cols = true;
  tiling.max_cols = kDecodeCols;
  // 2-3 and 6-7 leftover rows as one padded tile (tiled_gemm.h; bloom-560m fc1 on Zen 4: 3 rows
  // 0.19 ms, 4 rows 0.13 ms; 7 rows 0.24 ms, 8 rows 0.19 ms). The padding rows are zeros.
  tiling.pad_rows = true;
  const int64_t rows_read = TiledGemmRowsRead(tiling, a.m);

  thread_local std::vector<uint16_t> x_bf16;  // keeps its capacity: no allocation per step
  x_bf16.resize(static_cast<size_t>(rows_read * a.k));
  std::fill(x_bf16.begin() + a.m * a.k, x_bf16.end(), uint16_t{0});
  // (The workers write through this pointer: naming the thread_local in the lambda would name
  // each worker's own, empty one.)
  uint16_t* const xb = x_bf16.data();
  auto round_rows = [&](int64_t begin, int64_t end) {
    RoundRowsToBf16(a.x + begin * a.k, (end - begin) * a.k, xb + begin * a.k);
  };
  if (pool != nullptr && a.m * a.k >= 2 * kMinRoundElems) {
    pool->ParallelFor(a.m, std::max<int64_t>(1, kMinRoundElems / std::max<int64_t>(1, a.k)),
                      round_rows);
  } else {
    round_rows(0, a.m);
  }

  const char* w_base = static_cast<const char*>(a.w);
  // Column blocks and thread chunks are multiples of the tile width (a multiple of 16), so every
  // tile starts a panel; only the matrix's last tile can end inside one (its padding rows).
  RunTiledGemm(a, pool, isa != GemmIsa::kPortable && CpuHasAvx2Fma(), tiling,
               [&](int64_t m0, int rows, int64_t n0, int cols, float* dots, WeightPrefetch*) {
                 const int panels = (cols + kBf16PanelRows - 1) / kBf16PanelRows;
                 tile(xb + m0 * a.k, a.k, rows, w_base + n0 * tiling.w_row_bytes, panels, a.k,
                      dots, tiling.max_cols);
               });
}

}  // namespace blossom
