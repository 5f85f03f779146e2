#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_dot_tile.h"
#include "kernels/cpu/tiled_gemm.h"

namespace blossom {
namespace {

// x elements below which a chunk of rows to quantize is not worth another thread.
constexpr int64_t kMinQuantizeElems = 64 * 1024;

}  // namespace

static_assert(kQuantMaxTileRows * kQuantMaxTileCols <= kMaxTiledGemmDots,
              "RunTiledGemm's dots scratch must hold the largest quantized tile");

void QuantGemmNT(const GemmArgs& a, ThreadPool* pool, GemmIsa isa) {
  if (a.m <= 0 || a.n <= 0) return;
  if (isa == GemmIsa::kAuto) isa = BestGemmIsa();
  const bool avx2 = (isa == GemmIsa::kAvx2 || isa == GemmIsa::kAvx512) && CpuHasAvx2Fma();
  // kAvx2 and kAvx512 mean the fastest x86 integer dot this CPU has (VNNI where present): every path
  // gives the same bits, so the choice never changes a result.
  const QuantDotTileFn tile = avx2 ? BestQuantDotTileX86() : &QuantDotTilePortable;
  const int64_t blocks = a.k / kQuantBlock;

  thread_local std::vector<Q8Block> x_codes;
  x_codes.resize(static_cast<size_t>(a.m * blocks));
  Q8Block* xq = x_codes.data();
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) QuantizeActivationRow(a.x + r * a.k, a.k, xq + r * blocks);
  };
  if (pool != nullptr) {
    pool->ParallelFor(a.m, std::max<int64_t>(1, kMinQuantizeElems / std::max<int64_t>(1, a.k)),
                      quantize_rows);
  } else {
    quantize_rows(0, a.m);
  }

  // Decode: one x row against 4 weight rows; prefill: 4 x rows against 2 (8 accumulators, the
  // weight codes and their absolute values fit the 16 AVX2 registers). Shapes never change a
  // result (quant_dot_tile.h).
  GemmTiling tiling;
  tiling.decode_cols = 4;
  tiling.prefill_rows = kQuantMaxTileRows;
  tiling.prefill_cols = 2;
  tiling.max_cols = kQuantMaxTileCols;
  tiling.w_row_bytes = DTypeBytes(a.w_dtype, a.k);
  const char* w_base = static_cast<const char*>(a.w);
  RunTiledGemm(a, pool, avx2, tiling, [&](int64_t m0, int rows, int64_t n0, int cols, float* dots) {
    tile(xq + m0 * blocks, blocks, rows, w_base + n0 * tiling.w_row_bytes, a.w_dtype, cols, a.k,
         dots, kQuantMaxTileCols);
  });
}

}  // namespace blossom
