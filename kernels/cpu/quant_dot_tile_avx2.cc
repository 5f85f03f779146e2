// AVX2 integer micro-kernels of the quantized GEMM: each block's 32 int8 products by vpmaddubsw
// (pairs into int16) then vpmaddwd (into 8 int32 lanes), then one int32 per pair. Built with
// function target attributes and called only after a run-time CPU check, like dot_tile_avx2.cc.
// The VNNI paths (quant_dot_tile_vnni.cc) share the tiles and replace those two steps by one.
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_dot_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {

#if defined(__x86_64__)
namespace {

#define QTILE_TARGET BLOSSOM_AVX2

// vpmaddubsw multiplies an unsigned by a signed byte, so each product w * x is formed as
// |w| * (x * sign(w)); with |w| <= 127 and |x| <= 127 a pair sum (<= 32258) never saturates int16.
QTILE_TARGET inline __m256i QTileProducts(__m256i xv, __m256i wv, __m256i wabs) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv, wv)),
                           _mm256_set1_epi16(1));
}

#include "kernels/cpu/quant_dot_tile_x86.inc"

#undef QTILE_TARGET

}  // namespace

void QuantDotTileAvx2(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                      int cols, int64_t k, float* dots, int64_t ldd) {
  RunTile(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#else  // not x86-64: the portable path only.

void QuantDotTileAvx2(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                      int cols, int64_t k, float* dots, int64_t ldd) {
  QuantDotTilePortable(x, ldx, rows, w, w_dtype, cols, k, dots, ldd);
}

#endif

}  // namespace blossom
