// The tiling, cache blocking, threading and epilogue shared by GemmNT (gemm.h) and QuantGemmNT
// (quant_gemm.h); each supplies its micro-kernel call and tile widths.
//
// Below the smallest multi-row tile (decode) each x row runs against `decode_cols` weight rows at
// a time, then the rest at once (decode_any_cols) or `decode_mid_cols` (if non-zero), then 1;
// otherwise tiles of prefill_rows x
// prefill_cols, then prefill_rows x (the columns left, with prefill_any_cols; else 1 at a time),
// then the same with prefill_rows_small rows (if set), and the leftover rows one at a time.
// With pad_rows, leftovers of 2 or more rows run as one padded multi-row tile instead (see
// TileRowPlan): a multi-row tile reads each weight once for all its rows, where single rows read
// the block once each, and on cores with spare FMA throughput (fp32 and bf16 tiles) the padding
// rows cost less than those extra passes (gemm-bench: 3 rows took 1.6x the time of a 4-row tile,
// 7 rows 1.4x that of an 8-row one).
// Columns are processed in blocks of ~192 KiB of weights (kept in L2 while every x row passes
// over them) and split over threads by output columns only. None of this changes a result: every
// micro-kernel computes each element in one fixed order whatever its tile (dot_tile.h,
// quant_dot_tile.h).
//
// Thread-safe as its callers: no shared mutable state; `tile` is called concurrently from the
// pool's threads on disjoint columns and must write only its `dots`.
#ifndef BLOSSOM_KERNELS_CPU_TILED_GEMM_H_
#define BLOSSOM_KERNELS_CPU_TILED_GEMM_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/activation.h"
#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace blossom {

// Weight bytes of one column block (Zen 3 has 512 KiB of L2 per core; room is left for the x
// rows and the output). GemmNT also sizes its prefill panels by it, so a panel is one block.
constexpr int64_t kColumnBlockBytes = 192 * 1024;
// Size of the per-thread dots scratch: every tiling needs prefill_rows * max_cols (and
// max_cols >= decode_cols) at most this; GemmNT and QuantGemmNT check theirs at compile time.
constexpr int kMaxTiledGemmDots = 8 * 128;

// out[i] = a[i] + b[i] for i < n: the same IEEE additions in any width. SSE (baseline x86-64)
// where available: the compiler left this loop scalar (its -O2 vectorizer refuses loops that
// need a remainder), and the scalar loop was 9% of a 512-token int8 prefill.
inline void AddRows(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(out + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
#endif
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

struct GemmTiling {
  int decode_cols = 1, decode_mid_cols = 0;
  bool decode_any_cols = false;  // the 1-row tile takes any cols <= decode_cols (row pairs)
  int prefill_rows = 1, prefill_cols = 1;
  int prefill_rows_small = 0;  // if non-zero (< prefill_rows): tiles of this many rows next
  bool prefill_any_cols = false;  // the tile takes any cols <= prefill_cols (a panel)
  int max_cols = 1;         // row stride of the dots scratch (>= every tile's cols)
  size_t w_row_bytes = 0;   // bytes of one weight row
  // Leftover rows run as one padded tile (TileRowPlan): the tile callback then reads x rows up to
  // TiledGemmRowsRead(tiling, m), beyond m (the caller provides them, finite: zeros); their dots
  // are dropped. No result changes (every element is computed in its fixed order in any tile).
  bool pad_rows = false;
  // Up to this many x rows (0: never), the multi-row tiles get the thread's next column block as
  // their WeightPrefetch (dot_tile.h). With few rows a block's weights are used by few tiles, the
  // first of which would otherwise wait on DRAM; with many the block is read once among many
  // tiles, and prefetching the next one early only evicts it again (512-token prefill measured
  // 0.96x with it).
  int64_t prefetch_max_m = 0;
};

// One multi-row tile of a GEMM's rows: x rows [m0, m0 + rows) are read, the first `valid` of
// them are real (valid < rows only in a padded tile).
struct TileRows {
  int64_t m0 = 0;
  int rows = 0, valid = 0;
};

// The multi-row tiles over m rows, in order, and the first row left to the 1-row tiles. Full
// prefill_rows tiles, then (without pad_rows) as many prefill_rows_small tiles as fit and the rest
// one at a time. With pad_rows the rest L (< prefill_rows) runs as one padded prefill_rows tile
// when L >= small + 2 (small = prefill_rows_small, or 0), else a small tile if L >= small and then
// a padded small tile for what is left if that is 2 or more rows; a single row stays single (a
// padded tile costs more than one 1-row pass).
struct TileRowPlan {
  int64_t full_big_tiles = 0;  // rows [0, full_big_tiles * prefill_rows) in full big tiles
  TileRows tiles[2];           // then these (a small tile, a padded one)
  int num_tiles = 0;
  int64_t single_rows_from = 0;  // then rows [single_rows_from, m) one at a time
  int64_t rows_read = 0;         // the x rows the tiles read: >= m with padding

  TileRowPlan(const GemmTiling& t, int64_t m) : rows_read(m) {
    const int big = t.prefill_rows, small = t.prefill_rows_small;
    const int min_rows = small > 0 ? small : big;
    if (big <= 1 || (m < min_rows && !(t.pad_rows && m >= 2))) return;  // all single rows
    full_big_tiles = m / big;
    int64_t m0 = full_big_tiles * big;
    int64_t left = m - m0;  // < big
    auto add = [&](int rows, int64_t valid) {
      tiles[num_tiles++] = {m0, rows, static_cast<int>(valid)};
      rows_read = std::max(rows_read, m0 + rows);
      m0 += valid;
      left -= valid;
    };
    if (t.pad_rows && left >= small + 2) {
      add(big, left);
    } else if (small > 0) {
      if (left >= small) add(small, small);  // at most one: small is half of big (8 and 4)
      if (t.pad_rows && left >= 2) add(small, left);
    }
    single_rows_from = m0;
  }
};

// The x rows RunTiledGemm's tiles read for an m-row GEMM (m, or more with pad_rows).
inline int64_t TiledGemmRowsRead(const GemmTiling& t, int64_t m) {
  return TileRowPlan(t, m).rows_read;
}

// The fp32 x rows for a GEMM whose tiling may pad rows: a.x itself when no tile reads past row m,
// else a copy followed by zero rows, in the calling thread's storage (valid until its next call;
// the pool's workers read it through the returned pointer while the caller waits).
inline const float* PaddedX(const GemmTiling& t, const GemmArgs& a) {
  const int64_t rows = TiledGemmRowsRead(t, a.m);
  if (rows == a.m) return a.x;
  thread_local std::vector<float> padded;  // keeps its capacity: no allocation per step
  padded.assign(static_cast<size_t>(rows * a.k), 0.0f);
  std::copy(a.x, a.x + a.m * a.k, padded.begin());
  return padded.data();
}

// tile(m0, rows, n0, cols, dots, prefetch) writes dots[r * tiling.max_cols + c] = x row m0 + r .
// w row n0 + c; `prefetch` (never null; often empty) is the weight range it may prefetch.
template <typename Tile>
void RunTiledGemm(const GemmArgs& a, ThreadPool* pool, bool vector_epilogue, const GemmTiling& t,
                  const Tile& tile) {
  // The work below which a chunk is not worth another thread.
  constexpr int64_t kMinChunkMacs = 64 * 1024;
  const TileRowPlan plan(t, a.m);
  const bool row_at_a_time = plan.full_big_tiles == 0 && plan.num_tiles == 0;
  const int64_t width = row_at_a_time ? t.decode_cols : t.prefill_cols;
  const int64_t groups = (a.n + width - 1) / width;
  const int64_t block_cols = std::max<int64_t>(
      width, kColumnBlockBytes / static_cast<int64_t>(std::max<size_t>(1, t.w_row_bytes)) / width * width);

  // The bias as fp32 once per call (16-bit biases widened here, not per element and row).
  const float* bias = nullptr;
  if (a.bias != nullptr && a.bias_dtype == DType::kF32) {
    bias = static_cast<const float*>(a.bias);
  } else if (a.bias != nullptr) {
    thread_local std::vector<float> widened;  // keeps its capacity: no allocation per step
    widened.resize(static_cast<size_t>(a.n));
    ConvertToF32(a.bias, a.bias_dtype, widened.data(), widened.size());
    bias = widened.data();
  }
  auto store = [&](int64_t m0, int rows, int64_t n0, int cols, const float* dots) {  // valid rows
    for (int r = 0; r < rows; ++r) {
      float* out_row = a.out + (m0 + r) * a.n + n0;
      const float* dot_row = dots + r * t.max_cols;
      if (bias == nullptr) {
        std::copy(dot_row, dot_row + cols, out_row);
      } else {
        AddRows(dot_row, bias + n0, out_row, cols);
      }
    }
  };
  // The activation runs over each finished row segment (vectorised, still cache-hot).
  auto activate = [&](int64_t m0, int rows, int64_t n_begin, int64_t n_end) {
    if (a.activation != Activation::kBloomGelu) return;
    for (int r = 0; r < rows; ++r)
      BloomGeluInPlace(a.out + (m0 + r) * a.n + n_begin, n_end - n_begin, vector_epilogue);
  };
  auto run_groups = [&](int64_t g_begin, int64_t g_end) {
    float dots[kMaxTiledGemmDots];
    const int64_t n_begin = g_begin * width, n_end = std::min(a.n, g_end * width);
    const bool prefetch_next = !row_at_a_time && a.m <= t.prefetch_max_m;
    for (int64_t nb = n_begin; nb < n_end; nb += block_cols) {
      const int64_t ne = std::min(n_end, nb + block_cols);
      WeightPrefetch prefetch;
      if (prefetch_next) {  // this chunk's next block, if it has one
        const char* w = static_cast<const char*>(a.w);
        prefetch.next = w + ne * static_cast<int64_t>(t.w_row_bytes);
        prefetch.end = w + std::min(n_end, ne + block_cols) * static_cast<int64_t>(t.w_row_bytes);
      }
      auto run_tile_rows = [&](int64_t m0, int rows, int valid) {
        for (int64_t n0 = nb; n0 < ne;) {
          const int cols = ne - n0 >= t.prefill_cols ? t.prefill_cols
                           : t.prefill_any_cols    ? static_cast<int>(ne - n0)
                                                   : 1;
          tile(m0, rows, n0, cols, dots, &prefetch);
          store(m0, valid, n0, cols, dots);
          n0 += cols;
        }
        activate(m0, valid, nb, ne);
      };
      for (int64_t i = 0; i < plan.full_big_tiles; ++i) {
        run_tile_rows(i * t.prefill_rows, t.prefill_rows, t.prefill_rows);
      }
      for (int i = 0; i < plan.num_tiles; ++i) {
        run_tile_rows(plan.tiles[i].m0, plan.tiles[i].rows, plan.tiles[i].valid);
      }
      for (int64_t m0 = plan.single_rows_from; m0 < a.m; ++m0) {
        for (int64_t n0 = nb; n0 < ne;) {
          const int64_t left = ne - n0;
          const int cols = left >= t.decode_cols ? t.decode_cols
                           : t.decode_any_cols   ? static_cast<int>(left)
                           : (t.decode_mid_cols > 0 && left >= t.decode_mid_cols) ? t.decode_mid_cols
                                                                                  : 1;
          tile(m0, 1, n0, cols, dots, &prefetch);
          store(m0, 1, n0, cols, dots);
          n0 += cols;
        }
        activate(m0, 1, nb, ne);
      }
    }
  };
  // Split over output columns only: the split never touches an element's accumulation order.
  const int64_t macs_per_group = std::max<int64_t>(1, a.k * a.m * width);
  const int64_t min_groups = std::max<int64_t>(1, kMinChunkMacs / macs_per_group);
  if (pool != nullptr) {
    pool->ParallelFor(groups, min_groups, run_groups);
  } else {
    run_groups(0, groups);
  }
}

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_TILED_GEMM_H_
