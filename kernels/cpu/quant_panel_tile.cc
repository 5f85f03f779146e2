#include "kernels/cpu/quant_panel_tile.h"

#include <cstring>

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

// The panel's block b: 8 vectors of 64 code bytes, then 16 fp32 scales.
inline const uint8_t* PanelBlock(const void* panel, int64_t b) {
  return static_cast<const uint8_t*>(panel) + b * kQ8PanelBlockBytes;
}

}  // namespace

void QuantPanelXBias(const Q8Block* x, int64_t blocks, int32_t code_offset, int32_t* x_bias) {
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t sum = 0;
    for (int i = 0; i < kQuantBlock; ++i) sum += x[b].codes[i];
    x_bias[b] = -code_offset * sum;
  }
}

void QuantQ4PanelTilePortable(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                              const void* panel, int64_t blocks, float* dots, int64_t ldd) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < kQ4PanelRows; ++c) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* pb = static_cast<const uint8_t*>(panel) + b * kQ4PanelBlockBytes;
        const Q8Block& xb = x[r * ldx + b];
        int32_t dot = x_bias[r * ldx + b];
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          const uint8_t byte = pb[Q4PanelByteOffset(c, j)];
          dot += static_cast<int32_t>(byte & 0xF) * xb.codes[j] +
                 static_cast<int32_t>(byte >> 4) * xb.codes[j + kQuantBlock / 2];
        }
        float w_scale;
        std::memcpy(&w_scale, pb + 256 + c * sizeof(float), sizeof(float));
        const float d = xb.scale * w_scale;
        acc = acc + static_cast<float>(dot) * d;
      }
      dots[r * ldd + c] = acc;
    }
  }
}

void QuantPanelTilePortable(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                            const void* panel, int64_t blocks, float* dots, int64_t ldd) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < kQ8PanelRows; ++c) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* pb = PanelBlock(panel, b);
        const Q8Block& xb = x[r * ldx + b];
        int32_t dot = x_bias[r * ldx + b];
        for (int i = 0; i < kQuantBlock; ++i) {
          dot += static_cast<int32_t>(pb[Q8PanelCodeOffset(c, i)]) * xb.codes[i];
        }
        float w_scale;
        std::memcpy(&w_scale, pb + 512 + c * sizeof(float), sizeof(float));
        const float d = xb.scale * w_scale;
        acc = acc + static_cast<float>(dot) * d;
      }
      dots[r * ldd + c] = acc;
    }
  }
}

#if defined(__x86_64__)
namespace {

#define PANEL_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512vnni")))

// Multi-row tiles prefetch the weights 4 blocks ahead (panels are consecutive, so past a panel's
// end this is the next panel's start). With 8 rows the hardware prefetcher alone left the LM
// head's int8 GEMM at 8 rows waiting on memory: 25 -> 11 ms on a 2-core Zen 4, and 3.7 -> 2.6 ms
// for fc1 at 128 rows (gemm-bench; 1, 2 and 4 blocks ahead measured alike). One row (decode)
// keeps up without it, and measured the same with it.
constexpr int kPrefetchBlocks = 4;

// R x rows by the panel's 16 rows, int8 (kQ4 false) or int4 panels. Per block: the 8 code
// vectors are formed once for all R rows (int8: 8 loads; int4: 4 loads, each split into its low
// nibbles, codes 4j .., and its high ones, codes 16 + 4j ..); each row's dot takes 8 vpdpbusd
// (x's 4 codes j broadcast against vector j), in two chains of 4 so that one row alone (decode)
// is not bound by vpdpbusd's latency, started from x_bias.
template <int R, bool kQ4>
PANEL_TARGET void PanelTile(const Q8Block* x, const int32_t* x_bias, int64_t ldx, const void* panel,
                            int64_t blocks, float* dots, int64_t ldd) {
  constexpr size_t kBlockBytes = kQ4 ? kQ4PanelBlockBytes : kQ8PanelBlockBytes;
  constexpr size_t kScalesAt = kQ4 ? 256 : 512;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* pb = static_cast<const uint8_t*>(panel) + b * kBlockBytes;
    if constexpr (R > 1) {
#pragma GCC unroll 9
      for (size_t line = 0; line < kBlockBytes / 64; ++line) {
        _mm_prefetch(reinterpret_cast<const char*>(pb) + kPrefetchBlocks * kBlockBytes + 64 * line, _MM_HINT_T0);
      }
    }
    __m512i wv[8];
    if constexpr (kQ4) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_loadu_si512(pb + 64 * j);
        wv[j] = _mm512_and_si512(v, low);
        wv[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) wv[j] = _mm512_loadu_si512(pb + 64 * j);
    }
    const __m512 w_scale = _mm512_loadu_ps(reinterpret_cast<const float*>(pb + kScalesAt));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Q8Block& xb = x[r * ldx + b];
      int32_t xc[8];
      std::memcpy(xc, xb.codes, sizeof(xc));
      __m512i d0 = _mm512_set1_epi32(x_bias[r * ldx + b]);
      __m512i d1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j = 0; j < 8; j += 2) {
        d0 = _mm512_dpbusd_epi32(d0, wv[j], _mm512_set1_epi32(xc[j]));
        d1 = _mm512_dpbusd_epi32(d1, wv[j + 1], _mm512_set1_epi32(xc[j + 1]));
      }
      const __m512i dot = _mm512_add_epi32(d0, d1);  // exact
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(xb.scale), w_scale);
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(dot), d));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(dots + r * ldd, acc[r]);
}

template <bool kQ4>
void PanelTileRows(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows, const void* panel,
                   int64_t blocks, float* dots, int64_t ldd) {
  switch (rows) {
    case 8:
      PanelTile<8, kQ4>(x, x_bias, ldx, panel, blocks, dots, ldd);
      return;
    case 4:
      PanelTile<4, kQ4>(x, x_bias, ldx, panel, blocks, dots, ldd);
      return;
    default:
      for (int r = 0; r < rows; ++r) {
        PanelTile<1, kQ4>(x + r * ldx, x_bias + r * ldx, ldx, panel, blocks, dots + r * ldd, ldd);
      }
  }
}

#undef PANEL_TARGET

}  // namespace

void QuantPanelTileAvx512Vnni(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                              const void* panel, int64_t blocks, float* dots, int64_t ldd) {
  PanelTileRows<false>(x, x_bias, ldx, rows, panel, blocks, dots, ldd);
}

void QuantQ4PanelTileAvx512Vnni(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                                const void* panel, int64_t blocks, float* dots, int64_t ldd) {
  PanelTileRows<true>(x, x_bias, ldx, rows, panel, blocks, dots, ldd);
}

bool QuantPanelTileAvx512VnniUsable() { return CpuHasAvx512() && CpuHasAvx512Vnni(); }

#else  // not x86-64

void QuantPanelTileAvx512Vnni(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                              const void* panel, int64_t blocks, float* dots, int64_t ldd) {
  QuantPanelTilePortable(x, x_bias, ldx, rows, panel, blocks, dots, ldd);
}

void QuantQ4PanelTileAvx512Vnni(const Q8Block* x, const int32_t* x_bias, int64_t ldx, int rows,
                                const void* panel, int64_t blocks, float* dots, int64_t ldd) {
  QuantQ4PanelTilePortable(x, x_bias, ldx, rows, panel, blocks, dots, ldd);
}

bool QuantPanelTileAvx512VnniUsable() { return false; }

#endif

}  // namespace blossom
