#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace blossom {
namespace {

// 8 fp32 lanes. GCC lowers vector types to AVX (or SSE registers on the baseline target); the
// arithmetic per lane is the same either way, so results do not depend on the instruction set.
typedef float Vec8 __attribute__((vector_size(32), aligned(4)));

constexpr int kRowTile = 4;  // x rows per micro-kernel
constexpr int kColTile = 4;  // w rows (output columns) per tile

inline Vec8 Load8(const float* p) {
  Vec8 v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

// fp64 accumulators, 4 lanes per vector: products of fp32 values are exact in fp64, so the only
// rounding is in the (long) sums, and the CPU reference stays far closer to the exact result than
// any fp32 GEMM it is compared with.
typedef double Vec4d __attribute__((vector_size(32), aligned(8)));

// An AVX2 clone and a baseline clone, picked at load time by an ifunc resolver. Not under
// ThreadSanitizer: GCC instruments the generated resolver (it calls __tsan_func_entry), and the
// dynamic loader runs it while relocating this library, before the TSan runtime has set up the
// thread, which crashes every binary at load (SIGSEGV in libtsan). TSan builds use the baseline
// clone only; it is the same source with the same per-lane operation order (see Vec8).
#if defined(__SANITIZE_THREAD__)
#define BLOSSOM_MICROKERNEL_CLONES
#else
#define BLOSSOM_MICROKERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#endif

inline Vec4d Low(Vec8 v) { return Vec4d{v[0], v[1], v[2], v[3]}; }
inline Vec4d High(Vec8 v) { return Vec4d{v[4], v[5], v[6], v[7]}; }

// The one reduction every element uses: a fixed tree over the 8 lanes, then the scalar tail.
inline float Reduce(Vec4d lo, Vec4d hi, double tail) {
  double a = (lo[0] + lo[1]) + (lo[2] + lo[3]);
  double b = (hi[0] + hi[1]) + (hi[2] + hi[3]);
  return static_cast<float>((a + b) + tail);
}

// Dot products of `rows` x rows with kColTile w rows. Every element follows exactly the
// operation order of the single-row case, so tiling never changes a result.
template <int kRows>
BLOSSOM_MICROKERNEL_CLONES void MicroKernel(
    const float* x, int64_t ldx, const float* w, int64_t k, float* dots /*[kRows][kColTile]*/) {
  Vec4d lo[kRows][kColTile], hi[kRows][kColTile];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kColTile; ++c) lo[r][c] = hi[r][c] = Vec4d{0, 0, 0, 0};
  int64_t k8 = k & ~int64_t{7};
  for (int64_t i = 0; i < k8; i += 8) {
    Vec4d w_lo[kColTile], w_hi[kColTile];
    for (int c = 0; c < kColTile; ++c) {
      Vec8 wv = Load8(w + c * k + i);
      w_lo[c] = Low(wv);
      w_hi[c] = High(wv);
    }
    for (int r = 0; r < kRows; ++r) {
      Vec8 xv = Load8(x + r * ldx + i);
      Vec4d x_lo = Low(xv), x_hi = High(xv);
      for (int c = 0; c < kColTile; ++c) {
        lo[r][c] += x_lo * w_lo[c];
        hi[r][c] += x_hi * w_hi[c];
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kColTile; ++c) {
      double tail = 0.0;
      for (int64_t i = k8; i < k; ++i) tail += double(x[r * ldx + i]) * double(w[c * k + i]);
      dots[r * kColTile + c] = Reduce(lo[r][c], hi[r][c], tail);
    }
  }
}

}  // namespace

float BloomGelu(float x) {
  return x * 0.5f * (1.0f + std::tanh(0.79788456f * x * (1.0f + 0.044715f * x * x)));
}

void GemmNT(const GemmArgs& a, ThreadPool* pool) {
  const int64_t num_col_tiles = (a.n + kColTile - 1) / kColTile;
  auto run_tiles = [&](int64_t tile_begin, int64_t tile_end) {
    // Per-chunk scratch: one tile of w in fp32 (only used for half weights or a ragged last tile).
    std::vector<float> w_tile(static_cast<size_t>(kColTile * a.k));
    float dots[kRowTile * kColTile];
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int64_t n0 = tile * kColTile;
      const int64_t cols = std::min<int64_t>(kColTile, a.n - n0);
      const float* w;
      if (a.w_dtype == DType::kF32 && cols == kColTile) {
        w = static_cast<const float*>(a.w) + n0 * a.k;  // zero copy
      } else {
        ConvertToF32(static_cast<const char*>(a.w) + n0 * a.k * DTypeSize(a.w_dtype), a.w_dtype,
                     w_tile.data(), static_cast<size_t>(cols * a.k));
        std::fill(w_tile.begin() + cols * a.k, w_tile.end(), 0.0f);
        w = w_tile.data();
      }
      float bias[kColTile] = {0, 0, 0, 0};
      if (a.bias != nullptr)
        for (int64_t c = 0; c < cols; ++c) bias[c] = LoadAsFloat(a.bias, a.bias_dtype, n0 + c);
      auto store = [&](int64_t m0, int rows) {
        for (int r = 0; r < rows; ++r) {
          float* out_row = a.out + (m0 + r) * a.n + n0;
          for (int64_t c = 0; c < cols; ++c) {
            float v = dots[r * kColTile + c];
            if (a.bias != nullptr) v += bias[c];
            if (a.activation == Activation::kBloomGelu) v = BloomGelu(v);
            out_row[c] = v;
          }
        }
      };
      int64_t m0 = 0;
      for (; m0 + kRowTile <= a.m; m0 += kRowTile) {
        MicroKernel<kRowTile>(a.x + m0 * a.k, a.k, w, a.k, dots);
        store(m0, kRowTile);
      }
      for (; m0 < a.m; ++m0) {
        MicroKernel<1>(a.x + m0 * a.k, a.k, w, a.k, dots);
        store(m0, 1);
      }
    }
  };
  // Split over output columns only: the split never touches an element's accumulation order.
  int64_t min_tiles = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, a.k * std::max<int64_t>(1, a.m)));
  if (pool != nullptr) {
    pool->ParallelFor(num_col_tiles, min_tiles, run_tiles);
  } else {
    run_tiles(0, num_col_tiles);
  }
}

}  // namespace blossom
