#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_dot_tile.h"

namespace blossom {
namespace {

// As in gemm.cc: a column block of weights stays in L2 while every x row passes over it, and a
// chunk below this much work is not worth another thread.
constexpr int64_t kColumnBlockBytes = 192 * 1024;
constexpr int64_t kMinChunkMacs = 64 * 1024;

}  // namespace

void QuantGemmNT(const GemmArgs& a, ThreadPool* pool, GemmIsa isa) {
  if (a.m <= 0 || a.n <= 0) return;
  if (isa == GemmIsa::kAuto) isa = BestGemmIsa();
  const bool avx2 = isa == GemmIsa::kAvx2 && CpuHasAvx2Fma();
  const QuantDotTileFn tile = avx2 ? &QuantDotTileAvx2 : &QuantDotTilePortable;
  const int64_t blocks = a.k / kQuantBlock;

  thread_local std::vector<Q8Block> x_codes;
  x_codes.resize(static_cast<size_t>(a.m * blocks));
  Q8Block* xq = x_codes.data();
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) QuantizeActivationRow(a.x + r * a.k, a.k, xq + r * blocks);
  };
  if (pool != nullptr) {
    pool->ParallelFor(a.m, std::max<int64_t>(1, kMinChunkMacs / std::max<int64_t>(1, a.k)),
                      quantize_rows);
  } else {
    quantize_rows(0, a.m);
  }

  const size_t w_row_bytes = DTypeBytes(a.w_dtype, a.k);
  const char* w_base = static_cast<const char*>(a.w);
  const bool row_at_a_time = a.m < kQuantMaxTileRows;
  const int64_t width = row_at_a_time ? 4 : 2;
  const int64_t groups = (a.n + width - 1) / width;
  const int64_t block_cols = std::max<int64_t>(
      width, kColumnBlockBytes / static_cast<int64_t>(std::max<size_t>(1, w_row_bytes)) / width * width);

  auto store = [&](int64_t m0, int rows, int64_t n0, int cols, const float* dots) {
    for (int r = 0; r < rows; ++r) {
      float* out_row = a.out + (m0 + r) * a.n + n0;
      for (int c = 0; c < cols; ++c) {
        float v = dots[r * kQuantMaxTileCols + c];
        if (a.bias != nullptr) v += LoadAsFloat(a.bias, a.bias_dtype, n0 + c);
        out_row[c] = v;
      }
    }
  };
  auto activate = [&](int64_t m0, int rows, int64_t n_begin, int64_t n_end) {
    if (a.activation != Activation::kBloomGelu) return;
    for (int r = 0; r < rows; ++r)
      BloomGeluInPlace(a.out + (m0 + r) * a.n + n_begin, n_end - n_begin, avx2);
  };
  auto run_groups = [&](int64_t g_begin, int64_t g_end) {
    float dots[kQuantMaxTileRows * kQuantMaxTileCols];
    const int64_t n_begin = g_begin * width, n_end = std::min(a.n, g_end * width);
    for (int64_t nb = n_begin; nb < n_end; nb += block_cols) {
      const int64_t ne = std::min(n_end, nb + block_cols);
      int64_t m0 = 0;
      if (!row_at_a_time) {
        for (; m0 + kQuantMaxTileRows <= a.m; m0 += kQuantMaxTileRows) {
          for (int64_t n0 = nb; n0 < ne;) {
            const int cols = ne - n0 >= 2 ? 2 : 1;
            tile(xq + m0 * blocks, blocks, kQuantMaxTileRows, w_base + n0 * w_row_bytes,
                 a.w_dtype, cols, a.k, dots, kQuantMaxTileCols);
            store(m0, kQuantMaxTileRows, n0, cols, dots);
            n0 += cols;
          }
          activate(m0, kQuantMaxTileRows, nb, ne);
        }
      }
      for (; m0 < a.m; ++m0) {
        for (int64_t n0 = nb; n0 < ne;) {
          const int cols = ne - n0 >= 4 ? 4 : 1;
          tile(xq + m0 * blocks, blocks, 1, w_base + n0 * w_row_bytes, a.w_dtype, cols, a.k,
               dots, kQuantMaxTileCols);
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
