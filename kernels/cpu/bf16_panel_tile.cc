#include "kernels/cpu/bf16_panel_tile.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

// A subnormal (or zero) to a zero of its sign: vdpbf16ps's DAZ on inputs and FTZ on results.
inline float FlushSubnormal(float v) { return std::fabs(v) < FLT_MIN ? std::copysign(0.0f, v) : v; }

inline uint16_t RoundToBf16Flushed(float v) {
  uint16_t b = FloatToBF16(v);
  if ((b & 0x7f80u) == 0) b &= 0x8000u;  // exponent 0: zero or subnormal
  return b;
}

inline int64_t PanelBytes(int64_t k) { return int64_t{kBf16PanelRows} * k * 2; }

}  // namespace

void RoundRowsToBf16Portable(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToBf16Flushed(x[i]);
}

absl::Status PackBf16Panels(const void* src, DType src_dtype, int64_t n, int64_t k,
                            int64_t row_begin, int64_t row_end, void* dst) {
  if (!IsFloat(src_dtype) || k % 2 != 0 || row_begin % kBf16PanelRows != 0 ||
      (row_end % kBf16PanelRows != 0 && row_end != n) || row_begin < 0 || row_end > n ||
      row_begin > row_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bf16 panels: cannot pack rows [", row_begin, ", ", row_end, ") of a ", DTypeName(src_dtype),
        " [", n, ", ", k, "] matrix: ranges start on panels of ", kBf16PanelRows,
        " rows and the row length must be even"));
  }
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t row = row_begin; row < row_end; ++row) {
    uint16_t* panel_row = out + Bf16PanelIndex(row, 0, k);
    for (int64_t j = 0; j < k / 2; ++j) {
      panel_row[j * 2 * kBf16PanelRows] = RoundToBf16Flushed(LoadAsFloat(src, src_dtype, row * k + 2 * j));
      panel_row[j * 2 * kBf16PanelRows + 1] =
          RoundToBf16Flushed(LoadAsFloat(src, src_dtype, row * k + 2 * j + 1));
    }
  }
  if (row_end == n) {  // the last panel's padding rows
    for (int64_t row = n; row % kBf16PanelRows != 0; ++row) {
      uint16_t* panel_row = out + Bf16PanelIndex(row, 0, k);
      for (int64_t j = 0; j < k / 2; ++j) {
        panel_row[j * 2 * kBf16PanelRows] = 0;
        panel_row[j * 2 * kBf16PanelRows + 1] = 0;
      }
    }
  }
  return absl::OkStatus();
}

void UnpackBf16PanelRows(const void* panels, int64_t k, int64_t row_begin, int64_t row_end,
                         uint16_t* out) {
  const auto* in = static_cast<const uint16_t*>(panels);
  for (int64_t row = row_begin; row < row_end; ++row)
    for (int64_t i = 0; i < k; ++i) out[(row - row_begin) * k + i] = in[Bf16PanelIndex(row, i, k)];
}

void Bf16PanelTilePortable(const uint16_t* x, int64_t ldx, int rows, const void* w, int panels,
                           int64_t k, float* dots, int64_t ldd) {
  const auto* wp = static_cast<const uint16_t*>(w);
  for (int r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * ldx;
    for (int c = 0; c < panels * kBf16PanelRows; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k / 2; ++j) {
        const int64_t at = Bf16PanelIndex(c, 2 * j, k);
        const float x0 = FlushSubnormal(BF16ToFloat(xr[2 * j]));
        const float x1 = FlushSubnormal(BF16ToFloat(xr[2 * j + 1]));
        const float w0 = FlushSubnormal(BF16ToFloat(wp[at]));
        const float w1 = FlushSubnormal(BF16ToFloat(wp[at + 1]));
        acc = FlushSubnormal(std::fma(x1, w1, acc));
        acc = FlushSubnormal(std::fma(x0, w0, acc));
      }
      dots[r * ldd + c] = acc;
    }
  }
}

#if defined(__x86_64__)
namespace {

// x rounded as RoundToBf16Flushed does, 16 at a time: nearest even by the same integer bias, a
// NaN's top half with the quiet bit set, a zero exponent field to a signed zero.
BLOSSOM_AVX512 void RoundRowsToBf16Avx512(const float* x, int64_t n, uint16_t* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_loadu_si512(x + i);
    const __m512i abs = _mm512_and_si512(bits, abs_mask);
    const __m512i top = _mm512_srli_epi32(bits, 16);
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(bias, _mm512_and_si512(top, one))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, inf);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
    const __mmask16 zero_exponent =
        _mm512_testn_epi32_mask(rounded, _mm512_set1_epi32(0x7f80));
    rounded = _mm512_mask_mov_epi32(rounded, zero_exponent,
                                    _mm512_and_si512(rounded, _mm512_set1_epi32(0x8000)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(rounded));
  }
  RoundRowsToBf16Portable(x + i, n - i, out + i);
}

#define BF16_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")))

// R x rows by P consecutive panels: R * P accumulators of 16 outputs. Per element pair, the P
// panels' lines are loaded once for all R rows and each row's pair is broadcast once for all P
// panels. 8 rows x 3 panels (24 accumulators, 3 weight vectors and an x broadcast: 28 of the 32
// registers), 4 x 6, 1 x 8 (decode: 8 independent chains cover vdpbf16ps's latency).
template <int R, int P>
BF16_TARGET void Tile(const uint16_t* x, int64_t ldx, const char* w, int64_t k, float* dots,
                      int64_t ldd) {
  const int64_t panel_bytes = PanelBytes(k);
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t j = 0; j < k / 2; ++j) {
    __m512i wv[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) wv[p] = _mm512_loadu_si512(w + p * panel_bytes + j * 64);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, x + r * ldx + 2 * j, sizeof(pair));
      const __m512i xv = _mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)xv, (__m512bh)wv[p]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(dots + r * ldd + p * kBf16PanelRows, acc[r][p]);
}

using TileFn = void (*)(const uint16_t*, int64_t, const char*, int64_t, float*, int64_t);

// Tiles of R rows by 1 .. N panels, indexed by panel count - 1.
template <int R, int... P>
constexpr TileFn kTiles[] = {&Tile<R, P>...};

// `panels` panels by the widest tile of `tiles` (N panels), then one tile for the rest.
template <size_t N>
BF16_TARGET void RowsTile(const TileFn (&tiles)[N], const uint16_t* x, int64_t ldx, const char* w,
                          int panels, int64_t k, float* dots, int64_t ldd) {
  constexpr int kMax = static_cast<int>(N);
  int p = 0;
  for (; p + kMax <= panels; p += kMax)
    tiles[kMax - 1](x, ldx, w + p * PanelBytes(k), k, dots + p * kBf16PanelRows, ldd);
  if (p < panels)
    tiles[panels - p - 1](x, ldx, w + p * PanelBytes(k), k, dots + p * kBf16PanelRows, ldd);
}

#undef BF16_TARGET

}  // namespace

void Bf16PanelTileAvx512(const uint16_t* x, int64_t ldx, int rows, const void* w, int panels,
                         int64_t k, float* dots, int64_t ldd) {
  const char* wc = static_cast<const char*>(w);
  switch (rows) {
    case 8:
      RowsTile(kTiles<8, 1, 2, 3>, x, ldx, wc, panels, k, dots, ldd);
      return;
    case 4:
      RowsTile(kTiles<4, 1, 2, 3, 4, 5, 6>, x, ldx, wc, panels, k, dots, ldd);
      return;
    default:
      for (int r = 0; r < rows; ++r)
        RowsTile(kTiles<1, 1, 2, 3, 4, 5, 6, 7, 8>, x + r * ldx, ldx, wc, panels, k,
                       dots + r * ldd, ldd);
  }
}

bool Bf16PanelTileAvx512Usable() { return CpuHasAvx512Bf16(); }

void RoundRowsToBf16(const float* x, int64_t n, uint16_t* out) {
  if (CpuHasAvx512()) {
    RoundRowsToBf16Avx512(x, n, out);
  } else {
    RoundRowsToBf16Portable(x, n, out);
  }
}

#else  // not x86-64

void Bf16PanelTileAvx512(const uint16_t* x, int64_t ldx, int rows, const void* w, int panels,
                         int64_t k, float* dots, int64_t ldd) {
  Bf16PanelTilePortable(x, ldx, rows, w, panels, k, dots, ldd);
}

bool Bf16PanelTileAvx512Usable() { return false; }

void RoundRowsToBf16(const float* x, int64_t n, uint16_t* out) { RoundRowsToBf16Portable(x, n, out); }

#endif

}  // namespace blossom
