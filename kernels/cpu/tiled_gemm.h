// The tiling, cache blocking, threading and epilogue shared by GemmNT (gemm.h) and QuantGemmNT
// (quant_gemm.h); each supplies its micro-kernel call and tile widths.
//
// Below the smallest multi-row tile (decode) each x row runs against `decode_cols` weight rows at
// a time, then the rest at once (decode_any_cols) or `decode_mid_cols` (if non-zero), then 1;
// otherwise tiles of prefill_rows x
// prefill_cols, then prefill_rows x (the columns left, with prefill_any_cols; else 1 at a time),
// then the same with prefill_rows_small rows (if set), and the leftover rows one at a time.
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
  // Up to this many x rows (0: never), the multi-row tiles get the thread's next column block as
  // their WeightPrefetch (dot_tile.h). With few rows a block's weights are used by few tiles, the
  // first of which would otherwise wait on DRAM; with many the block is read once among many
  // tiles, and prefetching the next one early only evicts it again (512-token prefill measured
  // 0.96x with it).
  int64_t prefetch_max_m = 0;
};

// tile(m0, rows, n0, cols, dots, prefetch) writes dots[r * tiling.max_cols + c] = x row m0 + r .
// w row n0 + c; `prefetch` (never null; often empty) is the weight range it may prefetch.
template <typename Tile>
void RunTiledGemm(const GemmArgs& a, ThreadPool* pool, bool vector_epilogue, const GemmTiling& t,
                  const Tile& tile) {
  // The work below which a chunk is not worth another thread.
  constexpr int64_t kMinChunkMacs = 64 * 1024;
  const int min_tile_rows = t.prefill_rows_small > 0 ? t.prefill_rows_small : t.prefill_rows;
  const bool row_at_a_time = a.m < min_tile_rows;
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
  auto store = [&](int64_t m0, int rows, int64_t n0, int cols, const float* dots) {
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
      int64_t m0 = 0;
      if (!row_at_a_time) {
        for (const int rows : {t.prefill_rows, t.prefill_rows_small}) {
          if (rows <= 0) continue;
          for (; m0 + rows <= a.m; m0 += rows) {
            for (int64_t n0 = nb; n0 < ne;) {
              const int cols = ne - n0 >= t.prefill_cols ? t.prefill_cols
                               : t.prefill_any_cols    ? static_cast<int>(ne - n0)
                                                       : 1;
              tile(m0, rows, n0, cols, dots, &prefetch);
              store(m0, rows, n0, cols, dots);
              n0 += cols;
            }
            activate(m0, rows, nb, ne);
          }
        }
      }
      for (; m0 < a.m; ++m0) {
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
