// VNNI integer micro-kernels of the quantized GEMM: vpdpbusd forms a block's 32 int8 products
// and their 8 int32 lane sums in one instruction (AVX2 needs vpmaddubsw then vpmaddwd), and the
// tiles are the AVX2 ones (quant_dot_tile_x86.inc). Two encodings, each built with its own
// function target attributes and called only after its run-time CPU check:
//   AVX-VNNI (VEX; Alder Lake, Sapphire Rapids and later Intel, Zen 5)
//   AVX512-VNNI with AVX512VL (EVEX on 256-bit registers; Ice Lake, Cascade Lake, Zen 4)
// Integer sums are exact, so both give the portable path's bits (quant_dot_tile_test).
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_dot_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {

#if defined(__x86_64__)
namespace avx_vnni {
namespace {

#define QTILE_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))

// |w| (unsigned) times x * sign(w) (signed), 4 products summed per int32 lane; no int16 step,
// so nothing can saturate.
QTILE_TARGET inline __m256i QTileProducts(__m256i xv, __m256i wv, __m256i wabs) {
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), wabs, _mm256_sign_epi8(xv, wv));
}

#include "kernels/cpu/quant_dot_tile_x86.inc"

#undef QTILE_TARGET

}  // namespace
}  // namespace avx_vnni

namespace avx512_vnni {
namespace {

#define QTILE_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vnni,avx512vl")))

QTILE_TARGET inline __m256i QTileProducts(__m256i xv, __m256i wv, __m256i wabs) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, _mm256_sign_epi8(xv, wv));
}

#include "kernels/cpu/quant_dot_tile_x86.inc"

#undef QTILE_TARGET

}  // namespace
}  // namespace avx512_vnni

void QuantDotTileAvxVnni(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                         int cols, int64_t k, float* dots, int64_t ldd) {
  avx_vnni::RunTile(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

void QuantDotTileAvx512Vnni(const Q8Block* x, int64_t ldx, int rows, const void* w,
                            DType w_dtype, int cols, int64_t k, float* dots, int64_t ldd) {
  avx512_vnni::RunTile(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#else  // not x86-64: the portable path only.

void QuantDotTileAvxVnni(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                         int cols, int64_t k, float* dots, int64_t ldd) {
  QuantDotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

void QuantDotTileAvx512Vnni(const Q8Block* x, int64_t ldx, int rows, const void* w,
                            DType w_dtype, int cols, int64_t k, float* dots, int64_t ldd) {
  QuantDotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#endif

QuantDotTileFn BestQuantDotTileX86() {
  if (CpuHasAvxVnni()) return &QuantDotTileAvxVnni;
  if (CpuHasAvx512Vnni()) return &QuantDotTileAvx512Vnni;
  return &QuantDotTileAvx2;
}

}  // namespace blossom
