#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_tile.h"

namespace blossom {
namespace {

// Weight bytes of one column block: kept in L2 (512 KiB per core on Zen 3) while all x rows of a
// prefill pass over it, with room left for the x rows and the output.
constexpr int64_t kColumnBlockBytes = 192 * 1024;
// Work (multiply-adds) below which a chunk is not worth handing to another thread.
constexpr int64_t kMinChunkMacs = 64 * 1024;

bool UseAvx2(GemmIsa isa) {
  if (isa == GemmIsa::kAuto) isa = BestGemmIsa();
  return isa == GemmIsa::kAvx2 && CpuHasAvx2Fma();
}

}  // namespace

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kPortable:
      return "portable";
    case GemmIsa::kAvx2:
      return "avx2";
    default:
      return "auto";
  }
}

bool GemmIsaSupported(GemmIsa isa) {
  return isa != GemmIsa::kAvx2 || CpuHasAvx2Fma();
}

GemmIsa BestGemmIsa() {
  return CpuHasAvx2Fma() ? GemmIsa::kAvx2 : GemmIsa::kPortable;
}

float BloomGelu(float x) {
  float v = x;
  BloomGeluInPlace(&v, 1, false);
  return v;
}

void GemmNT(const GemmArgs& a, ThreadPool* pool, GemmIsa isa) {
  if (a.m <= 0 || a.n <= 0) return;
  const bool avx2 = UseAvx2(isa);
  const DotTileFn tile = avx2 ? &DotTileAvx2 : &DotTilePortable;
  const size_t w_row_bytes = static_cast<size_t>(a.k) * DTypeSize(a.w_dtype);
  const char* w_base = static_cast<const char*>(a.w);
  // Decode-sized batches run one x row against 8 weight rows (a weight element is used once per
  // row anyway); larger ones 4 x rows against 3 weight rows, so each widened weight vector feeds
  // four FMAs. Tile shapes never change a result (dot_tile.h).
  const bool row_at_a_time = a.m < kMaxTileRows;
  const int64_t width = row_at_a_time ? 8 : 3;
  const int64_t groups = (a.n + width - 1) / width;
  const int64_t block_cols = std::max<int64_t>(
      width, kColumnBlockBytes / static_cast<int64_t>(std::max<size_t>(1, w_row_bytes)) / width * width);

  auto store = [&](int64_t m0, int rows, int64_t n0, int cols, const float* dots) {
    for (int r = 0; r < rows; ++r) {
      float* out_row = a.out + (m0 + r) * a.n + n0;
      for (int c = 0; c < cols; ++c) {
        float v = dots[r * kMaxTileCols + c];
        if (a.bias != nullptr) v += LoadAsFloat(a.bias, a.bias_dtype, n0 + c);
        out_row[c] = v;
      }
    }
  };
  // One row of x against columns [n_begin, n_end), widest tiles first.
  auto row_tiles = [&](int64_t m0, int64_t n_begin, int64_t n_end, float* dots) {
    for (int64_t n0 = n_begin; n0 < n_end;) {
      const int64_t left = n_end - n0;
      const int cols = left >= width ? static_cast<int>(width) : (left >= 3 ? 3 : 1);
      tile(a.x + m0 * a.k, a.k, 1, w_base + n0 * w_row_bytes, a.w_dtype, cols, a.k, dots,
           kMaxTileCols);
      store(m0, 1, n0, cols, dots);
      n0 += cols;
    }
  };
  // The activation runs over each finished row segment (vectorised, still cache-hot).
  auto activate = [&](int64_t m0, int rows, int64_t n_begin, int64_t n_end) {
    if (a.activation != Activation::kBloomGelu) return;
    for (int r = 0; r < rows; ++r) BloomGeluInPlace(a.out + (m0 + r) * a.n + n_begin, n_end - n_begin, avx2);
  };
  auto run_groups = [&](int64_t g_begin, int64_t g_end) {
    float dots[kMaxTileRows * kMaxTileCols];
    const int64_t n_begin = g_begin * width, n_end = std::min(a.n, g_end * width);
    for (int64_t nb = n_begin; nb < n_end; nb += block_cols) {
      const int64_t ne = std::min(n_end, nb + block_cols);
      int64_t m0 = 0;
      if (!row_at_a_time) {
        for (; m0 + kMaxTileRows <= a.m; m0 += kMaxTileRows) {
          for (int64_t n0 = nb; n0 < ne;) {
            const int cols = ne - n0 >= 3 ? 3 : 1;
            tile(a.x + m0 * a.k, a.k, kMaxTileRows, w_base + n0 * w_row_bytes, a.w_dtype, cols,
                 a.k, dots, kMaxTileCols);
            store(m0, kMaxTileRows, n0, cols, dots);
            n0 += cols;
          }
          activate(m0, kMaxTileRows, nb, ne);
        }
      }
      for (; m0 < a.m; ++m0) {
        row_tiles(m0, nb, ne, dots);
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
