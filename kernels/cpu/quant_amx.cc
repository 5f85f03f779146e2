#include "kernels/cpu/quant_amx.h"

#include <cstddef>
#include <cstring>

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define BLOSSOM_HAVE_AMX 1
#endif

namespace blossom {

void PackAmxX(const Q8Block* x, int64_t ldx, int rows, int64_t blocks, int8_t* codes,
              float* scales) {
  for (int64_t b = 0; b < blocks; ++b) {
    int8_t* out = codes + b * kAmxXBlockBytes;
    for (int r = 0; r < kAmxTileRows; ++r) {
      const Q8Block* xb = r < rows ? &x[r * ldx + b] : nullptr;
      scales[b * kAmxTileRows + r] = xb != nullptr ? xb->scale : 0.0f;
      for (int g = 0; g < kQuantBlock / 4; ++g) {
        int8_t* dst = out + (g * kAmxTileRows + r) * 4;
        if (xb != nullptr) {
          std::memcpy(dst, xb->codes + 4 * g, 4);
        } else {
          std::memset(dst, 0, 4);
        }
      }
    }
  }
}

void Q8Tile16x16Scalar(const int8_t* x_codes, const float* x_scales, const void* w,
                       size_t row_bytes, int64_t blocks, float* dots, int64_t ldd) {
  for (int r = 0; r < kAmxTileRows; ++r) {
    for (int n = 0; n < kAmxTileRows; ++n) {
      const Q8Block* wn = reinterpret_cast<const Q8Block*>(static_cast<const char*>(w) + n * row_bytes);
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* xb = x_codes + b * kAmxXBlockBytes;
        int32_t dot = 0;
        for (int i = 0; i < kQuantBlock; ++i)
          dot += int32_t{xb[((i / 4) * kAmxTileRows + r) * 4 + i % 4]} * wn[b].codes[i];
        const float d = x_scales[b * kAmxTileRows + r] * wn[b].scale;
        const float product = static_cast<float>(dot) * d;
        acc = acc + product;
      }
      dots[r * ldd + n] = acc;
    }
  }
}

#if defined(BLOSSOM_HAVE_AMX)

namespace {

#define BLOSSOM_AMX __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,amx-tile,amx-int8")))

// The LDTILECFG memory operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

bool DetectAmx() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_tile = (edx >> 24) & 1, amx_int8 = (edx >> 25) & 1;
  if (!amx_tile || !amx_int8) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1)) return false;  // OSXSAVE
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3) != 3) return false;  // the OS enables XTILECFG and XTILEDATA
  // Linux hands the tile data state to a process only on request (ARCH_REQ_XCOMP_PERM, 0x1023,
  // for XFEATURE_XTILEDATA, 18); without it the first tile instruction faults.
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

}  // namespace

bool AmxInt8Usable() {
  // The tile kernels scale and store with AVX-512 (zmm) instructions: a CPU or VM that exposes
  // AMX with AVX-512 masked off must take the other paths, not fault.
  static const bool usable = CpuHasAvx512() && DetectAmx();
  return usable;
}

namespace {

// dots[(16 g + r) * ldd + n] = lane r of acc[g][n]: the accumulators (one per weight row, lanes
// over x rows) transposed into the tile's row-major output. Inlined so that the accumulators can
// stay in registers in the tile loops.
template <int G>
BLOSSOM_AMX __attribute__((always_inline)) inline void StoreDots(
    const __m512 (&acc)[G][kAmxTileRows], float* dots, int64_t ldd) {
  alignas(64) float t[kAmxTileRows][kAmxTileRows];
  for (int g = 0; g < G; ++g) {
    for (int n = 0; n < kAmxTileRows; ++n) _mm512_store_ps(t[n], acc[g][n]);
    for (int r = 0; r < kAmxTileRows; ++r)
      for (int n = 0; n < kAmxTileRows; ++n) dots[(g * kAmxTileRows + r) * ldd + n] = t[n][r];
  }
}

// G x groups of 16 rows (packed codes and scales x_codes + g * x_group_bytes, x_scales + g *
// x_group_scales) by 16 weight rows. With G = 2 each weight tile loaded (16 strided rows) feeds
// two TDPBSSDs: the loads of the strided weight rows, not the scaling, are what the 16 x 16 tile
// waits on. Tiles: C of group g in tmm g, the weights in tmm 2, x group g in tmm 3 + g.
template <int G>
BLOSSOM_AMX void AmxQ8Tile(const int8_t* x_codes, int64_t x_group_bytes, const float* x_scales,
                           int64_t x_group_scales, const void* w, size_t row_bytes,
                           int64_t blocks, float* dots, int64_t ldd, bool prefetch_weights) {
  static_assert(G == 1 || G == 2, "one or two x groups");
  TileConfig config;
  for (int g = 0; g < G; ++g) {
    config.rows[g] = kAmxTileRows;  // C: 16 weight rows x 16 int32 (one per x row)
    config.colsb[g] = 64;
    config.rows[3 + g] = kQuantBlock / 4;  // B: 8 rows of 4 codes x 16 x rows
    config.colsb[3 + g] = 64;
  }
  config.rows[2] = kAmxTileRows;  // A: 16 weight rows x one block's 32 codes
  config.colsb[2] = kQuantBlock;
  _tile_loadconfig(&config);
  const char* w_codes = static_cast<const char*>(w) + offsetof(Q8Block, codes);
  alignas(64) int32_t c[G][kAmxTileRows * kAmxTileRows];
  __m512 acc[G][kAmxTileRows];  // acc[g][weight row] lane r: the pair (x row 16 g + r, weight row)
  for (int g = 0; g < G; ++g)
    for (int n = 0; n < kAmxTileRows; ++n) acc[g][n] = _mm512_setzero_ps();
  // The weight tile's 16 rows are 16 short streams (about 1 KiB each at k = 1024), too short for
  // the hardware prefetcher: at batch 32 the tile load waited on them for most of this
  // function's time. With prefetch_weights, each step prefetches the 16 rows' block kAhead
  // blocks on into L1, and near the rows' end the first blocks of the 16 rows after them (the
  // next tile's, when the GEMM has one; a prefetch past the weights' end is a no-op, never a
  // fault): batch 8 1.19x, batch 32 1.08x; prefill 0.95x, where the weights are in L2 after the
  // first tile, hence the switch. 6 and 12 blocks ahead were no better, 16 and 32 worse;
  // stopping at the rows' end lost the batch-32 gain.
  constexpr int64_t kAhead = 8;
  const char* weights = static_cast<const char*>(w);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t ahead_block = b + kAhead;
    const char* ahead = ahead_block < blocks
                            ? weights + ahead_block * sizeof(Q8Block)
                            : weights + kAmxTileRows * row_bytes +
                                  (ahead_block - blocks) * sizeof(Q8Block);
    if (prefetch_weights) {
#pragma GCC unroll 16
      for (int n = 0; n < kAmxTileRows; ++n) _mm_prefetch(ahead + n * row_bytes, _MM_HINT_T0);
    }
    _tile_loadd(2, w_codes + b * sizeof(Q8Block), row_bytes);
    // Tile numbers are immediates, hence the spelled-out groups.
    _tile_zero(0);
    _tile_loadd(3, x_codes + b * kAmxXBlockBytes, 64);
    _tile_dpbssd(0, 2, 3);
    if constexpr (G == 2) {
      _tile_zero(1);
      _tile_loadd(4, x_codes + x_group_bytes + b * kAmxXBlockBytes, 64);
      _tile_dpbssd(1, 2, 4);
    }
    _tile_stored(0, c[0], 64);
    if constexpr (G == 2) _tile_stored(1, c[1], 64);
    for (int g = 0; g < G; ++g) {
      const __m512 xs = _mm512_loadu_ps(x_scales + g * x_group_scales + b * kAmxTileRows);
#pragma GCC unroll 16
      for (int n = 0; n < kAmxTileRows; ++n) {
        const float ws =
            reinterpret_cast<const Q8Block*>(static_cast<const char*>(w) + n * row_bytes)[b].scale;
        // d = x.scale * w.scale (one rounding, the same product as every path), then the
        // multiply and the add of the contract.
        const __m512 d = _mm512_mul_ps(xs, _mm512_set1_ps(ws));
        const __m512 product =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[g] + n * 16)), d);
        acc[g][n] = _mm512_add_ps(acc[g][n], product);
      }
    }
  }
  _tile_release();
  StoreDots<G>(acc, dots, ldd);
}

// The tile half of AmxQ8TilePipelined: block b's loads and multiplies into the C tiles of one
// parity, and their stores.
template <int G>
struct AmxPipeline {
  static_assert(G == 1 || G == 2, "one or two x groups");
  const int8_t* x_codes;
  int64_t x_group_bytes;
  const char* w_codes;
  size_t row_bytes;

  // Loads block b's tiles and starts its multiplies into the C tiles of parity P. The tile
  // intrinsics paste their tile numbers into the instruction, so they take literals.
  template <int P>
  BLOSSOM_AMX void Issue(int64_t b) const {
    const char* w_block = w_codes + b * sizeof(Q8Block);
    const int8_t* x0 = x_codes + b * kAmxXBlockBytes;
    const int8_t* x1 = x0 + x_group_bytes;
#define BLOSSOM_AMX_ISSUE(C0, C1, W)       \
  _tile_loadd(W, w_block, row_bytes);      \
  _tile_zero(C0);                          \
  _tile_loadd(3, x0, 64);                  \
  _tile_dpbssd(C0, W, 3);                  \
  if constexpr (G == 2) {                  \
    _tile_zero(C1);                        \
    _tile_loadd(4, x1, 64);                \
    _tile_dpbssd(C1, W, 4);                \
  }
    if constexpr (P == 0) {
      BLOSSOM_AMX_ISSUE(0, 1, 2)
    } else {
      BLOSSOM_AMX_ISSUE(5, 6, 7)
    }
#undef BLOSSOM_AMX_ISSUE
  }
  // Stores the C tiles of parity P (int32, [weight row][x row]) to c[g].
  template <int P>
  BLOSSOM_AMX void Store(int32_t (*c)[kAmxTileRows * kAmxTileRows]) const {
    if constexpr (P == 0) {
      _tile_stored(0, c[0], 64);
      if constexpr (G == 2) _tile_stored(1, c[1], 64);
    } else {
      _tile_stored(5, c[0], 64);
      if constexpr (G == 2) _tile_stored(6, c[1], 64);
    }
  }
};

// AmxQ8Tile for weights in L2 (prefill and large batches: no prefetch_weights), software-
// pipelined over blocks: block b + 1's tile loads and TDPBSSDs are issued before block b's
// results are stored and scaled, so the tile unit multiplies while the vector units scale. Done
// one block at a time, a profile of a 512-token prefill had the tile stores waiting on the
// multiplies and the multiplies on the loads for over half of AmxQ8Tile's time, the scaling the
// rest (benchmarks/results/2026-11-25-cpu-amx-pipeline.md). Weights streaming from DRAM keep
// AmxQ8Tile: there the next block's load, waiting on memory, held up this block's scaling.
template <int G>
BLOSSOM_AMX void AmxQ8TilePipelined(const int8_t* x_codes, int64_t x_group_bytes,
                                    const float* x_scales, int64_t x_group_scales, const void* w,
                                    size_t row_bytes, int64_t blocks, float* dots, int64_t ldd) {
  TileConfig config;
  for (const int first : {0, 5}) {  // the even blocks' tiles 0 (1) and 2, the odd ones' 5 (6), 7
    for (int g = 0; g < G; ++g) {
      config.rows[first + g] = kAmxTileRows;  // C: 16 weight rows x 16 int32 (one per x row)
      config.colsb[first + g] = 64;
    }
    config.rows[first + 2] = kAmxTileRows;  // A: 16 weight rows x one block's 32 codes
    config.colsb[first + 2] = kQuantBlock;
  }
  for (int g = 0; g < G; ++g) {
    config.rows[3 + g] = kQuantBlock / 4;  // B: 8 rows of 4 codes x 16 x rows
    config.colsb[3 + g] = 64;
  }
  _tile_loadconfig(&config);
  const AmxPipeline<G> pipe{x_codes, x_group_bytes,
                            static_cast<const char*>(w) + offsetof(Q8Block, codes), row_bytes};
  const char* weights = static_cast<const char*>(w);
  alignas(64) int32_t c[G][kAmxTileRows * kAmxTileRows];
  __m512 acc[G][kAmxTileRows];  // as in AmxQ8Tile
  for (int g = 0; g < G; ++g)
    for (int n = 0; n < kAmxTileRows; ++n) acc[g][n] = _mm512_setzero_ps();
  // Two blocks per iteration so that every tile number is a constant; the scaling is a macro,
  // not a lambda (called from two places, a lambda kept the accumulators in memory), and a loop
  // choosing the parity at run time measured no faster than AmxQ8Tile.
#define BLOSSOM_AMX_SCALE(block)                                                               \
  for (int g = 0; g < G; ++g) {                                                                \
    const __m512 xs = _mm512_loadu_ps(x_scales + g * x_group_scales + (block) * kAmxTileRows); \
    _Pragma("GCC unroll 16") for (int n = 0; n < kAmxTileRows; ++n) {                          \
      const float ws = reinterpret_cast<const Q8Block*>(weights + n * row_bytes)[block].scale; \
      const __m512 d = _mm512_mul_ps(xs, _mm512_set1_ps(ws)); /* as in AmxQ8Tile */            \
      const __m512 product =                                                                   \
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[g] + n * 16)), d);              \
      acc[g][n] = _mm512_add_ps(acc[g][n], product);                                           \
    }                                                                                          \
  }
  pipe.template Issue<0>(0);
  for (int64_t b = 0; b < blocks; b += 2) {
    // Block b is in flight in the even tiles: start b + 1 in the odd ones, then scale b.
    if (b + 1 < blocks) pipe.template Issue<1>(b + 1);
    pipe.template Store<0>(c);
    BLOSSOM_AMX_SCALE(b)
    if (b + 1 >= blocks) break;
    if (b + 2 < blocks) pipe.template Issue<0>(b + 2);
    pipe.template Store<1>(c);
    BLOSSOM_AMX_SCALE(b + 1)
  }
#undef BLOSSOM_AMX_SCALE
  _tile_release();
  StoreDots<G>(acc, dots, ldd);
}

}  // namespace

void AmxQ8Tile16x16(const int8_t* x_codes, const float* x_scales, const void* w,
                    size_t row_bytes, int64_t blocks, float* dots, int64_t ldd,
                    bool prefetch_weights) {
  if (!prefetch_weights) {
    AmxQ8TilePipelined<1>(x_codes, 0, x_scales, 0, w, row_bytes, blocks, dots, ldd);
    return;
  }
  AmxQ8Tile<1>(x_codes, 0, x_scales, 0, w, row_bytes, blocks, dots, ldd, prefetch_weights);
}

void AmxQ8Tile32x16(const int8_t* x_codes, const float* x_scales, const void* w,
                    size_t row_bytes, int64_t blocks, float* dots, int64_t ldd,
                    bool prefetch_weights) {
  if (!prefetch_weights) {
    AmxQ8TilePipelined<2>(x_codes, blocks * kAmxXBlockBytes, x_scales, blocks * kAmxTileRows, w,
                          row_bytes, blocks, dots, ldd);
    return;
  }
  AmxQ8Tile<2>(x_codes, blocks * kAmxXBlockBytes, x_scales, blocks * kAmxTileRows, w, row_bytes,
               blocks, dots, ldd, prefetch_weights);
}

#else  // no AMX on this platform

bool AmxInt8Usable() { return false; }

void AmxQ8Tile16x16(const int8_t* x_codes, const float* x_scales, const void* w, size_t row_bytes,
                    int64_t blocks, float* dots, int64_t ldd, bool) {
  Q8Tile16x16Scalar(x_codes, x_scales, w, row_bytes, blocks, dots, ldd);
}

void AmxQ8Tile32x16(const int8_t* x_codes, const float* x_scales, const void* w, size_t row_bytes,
                    int64_t blocks, float* dots, int64_t ldd, bool) {
  for (int g = 0; g < 2; ++g)
    Q8Tile16x16Scalar(x_codes + g * blocks * kAmxXBlockBytes, x_scales + g * blocks * kAmxTileRows,
                      w, row_bytes, blocks, dots + g * kAmxTileRows * ldd, ldd);
}

#endif

}  // namespace blossom
