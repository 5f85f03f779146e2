#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/tiled_gemm.h"
#include "kernels/cpu/weight_pairs.h"

namespace blossom {
namespace {

// The path GemmNT runs for `isa`: kAuto resolved, an unsupported one replaced by kPortable.
GemmIsa Resolve(GemmIsa isa) {
  if (isa == GemmIsa::kAuto) isa = BestGemmIsa();
  return GemmIsaSupported(isa) ? isa : GemmIsa::kPortable;
}

}  // namespace

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kPortable:
      return "portable";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kAvx512:
      return "avx512";
    default:
      return "auto";
  }
}

bool GemmIsaSupported(GemmIsa isa) {
  if (isa == GemmIsa::kAvx2) return CpuHasAvx2Fma();
  if (isa == GemmIsa::kAvx512) return CpuHasAvx512();
  return true;
}

GemmIsa BestGemmIsa() {
  if (CpuHasAvx512()) return GemmIsa::kAvx512;
  return CpuHasAvx2Fma() ? GemmIsa::kAvx2 : GemmIsa::kPortable;
}

float BloomGelu(float x) {
  float v = x;
  BloomGeluInPlace(&v, 1, false);
  return v;
}

static_assert(kMaxTileRows * kMaxTileCols <= kMaxTiledGemmDots,
              "RunTiledGemm's dots scratch must hold the largest dot_tile panel");

namespace {

// GemmNT over row-paired weights (weight_pairs.h). Tiles start on pairs: every tile width and
// column block is even, so only the matrix's last tile can end in its odd last row. The AVX-512
// tiles read the pairs directly; the other paths (the backend never pairs weights for them; tests
// and other callers) unpack each tile's rows first.
void PairedGemmNT(const GemmArgs& a, ThreadPool* pool, GemmIsa isa) {
  const DType element = PairedElementDType(a.w_dtype);
  const bool avx512 = isa == GemmIsa::kAvx512;
  const DotTileFn row_tile = isa == GemmIsa::kPortable ? &DotTilePortable : &DotTileAvx2;
  const char* w_base = static_cast<const char*>(a.w);
  GemmTiling tiling;
  tiling.w_row_bytes = DTypeBytes(element, a.k);
  // Prefill tiles of a ~192 KiB panel in whole groups of the 8- and 4-row tiles (3 and 4 pairs),
  // as GemmNT's; decode tiles of 12 pairs (dot_tile_avx512.cc).
  constexpr int kGroup = 24;
  tiling.prefill_cols = static_cast<int>(std::clamp<size_t>(
      kColumnBlockBytes / std::max<size_t>(1, tiling.w_row_bytes) / kGroup * kGroup, kGroup,
      kMaxTileCols / kGroup * kGroup));
  tiling.prefill_any_cols = true;
  tiling.decode_cols = kGroup;
  tiling.decode_any_cols = true;
  tiling.prefill_rows = avx512 ? 8 : 4;
  tiling.prefill_rows_small = avx512 ? 4 : 0;
  tiling.max_cols = kMaxTileCols;
  tiling.prefetch_max_m = avx512 ? 128 : 0;
  tiling.pad_rows = true;  // as GemmNT's
  const float* const x_rows = PaddedX(tiling, a);
  RunTiledGemm(a, pool, isa != GemmIsa::kPortable, tiling,
               [&](int64_t m0, int rows, int64_t n0, int cols, float* dots, WeightPrefetch* pf) {
                 const float* x = x_rows + m0 * a.k;
                 if (avx512) {
                   DotTileAvx512Pairs(x, a.k, rows, w_base + n0 * tiling.w_row_bytes, element,
                                       cols, a.k, dots, kMaxTileCols, pf);
                   return;
                 }
                 thread_local std::vector<char> unpacked;  // keeps its capacity
                 unpacked.resize(static_cast<size_t>(cols) * tiling.w_row_bytes);
                 UnpackPairRows(a.w, element, a.n, a.k, n0, cols, unpacked.data());
                 row_tile(x, a.k, rows, unpacked.data(), element, cols, a.k, dots, kMaxTileCols);
               });
}

}  // namespace

void GemmNT(const GemmArgs& a, ThreadPool* pool, GemmIsa isa) {
  if (a.m <= 0 || a.n <= 0) return;
  isa = Resolve(isa);
  if (IsRowPaired(a.w_dtype)) {
    PairedGemmNT(a, pool, isa);
    return;
  }
  const bool avx2 = isa != GemmIsa::kPortable;
  const bool avx512 = isa == GemmIsa::kAvx512;
  const DotTileFn tile = avx2 ? &DotTileAvx2 : &DotTilePortable;  // below AVX-512
  const char* w_base = static_cast<const char*>(a.w);
  // Decode-sized batches run one x row against 8 weight rows (a weight element is used once per
  // row anyway); larger ones 4 x rows against a panel of weight rows about 192 KiB big (dot_tile
  // walks it 3 weight rows at a time over all of k, so each widened weight vector feeds four
  // FMAs and the panel stays in L2 for every x row). Tile shapes never change a result
  // (dot_tile.h).
  GemmTiling tiling;
  tiling.w_row_bytes = static_cast<size_t>(a.k) * DTypeSize(a.w_dtype);
  // Whole weight groups per panel: 3 rows in the AVX2 kernel, 6 and 8 (its 8- and 4-row tiles)
  // in the AVX-512 one.
  const size_t group = avx512 ? 24 : 3;
  const int panel_cols = static_cast<int>(
      std::clamp<size_t>(kColumnBlockBytes / std::max<size_t>(1, tiling.w_row_bytes) / group * group,
                         group, kMaxTileCols / group * group));
  tiling.decode_cols = 8;
  tiling.decode_mid_cols = 3;
  // AVX-512: 8-row tiles, then 4-row ones; AVX2 and portable: 4-row tiles (dot_tile.h).
  tiling.prefill_rows = avx512 ? 8 : 4;
  tiling.prefill_rows_small = avx512 ? 4 : 0;
  tiling.prefill_cols = panel_cols;
  tiling.prefill_any_cols = true;
  tiling.max_cols = kMaxTileCols;
  // Batches up to 128 rows prefetch their next weight block (dot_tile.h): 1.08-1.19x at batch 8
  // and 32 on bloom-560m; the AVX-512 tiles only (the machines measured have it).
  tiling.prefetch_max_m = avx512 ? 128 : 0;
  // 2-3 and 6-7 leftover rows as one padded 4- or 8-row tile (tiled_gemm.h): the FMA units have
  // room for the padding rows, a second pass over the weight block costs more (bloom-560m fc1
  // on Zen 4: 3 rows 0.44 ms, 4 rows 0.28 ms; 7 rows 0.65 ms, 8 rows 0.45 ms).
  tiling.pad_rows = true;
  const float* const x_rows = PaddedX(tiling, a);
  RunTiledGemm(a, pool, avx2, tiling,
               [&](int64_t m0, int rows, int64_t n0, int cols, float* dots, WeightPrefetch* pf) {
                 const float* x = x_rows + m0 * a.k;
                 const char* w = w_base + n0 * tiling.w_row_bytes;
                 if (avx512) {
                   DotTileAvx512(x, a.k, rows, w, a.w_dtype, cols, a.k, dots, kMaxTileCols, pf);
                 } else {
                   tile(x, a.k, rows, w, a.w_dtype, cols, a.k, dots, kMaxTileCols);
                 }
               });
}

}  // namespace blossom
