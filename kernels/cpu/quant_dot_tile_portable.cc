#include "kernels/cpu/quant_dot_tile.h"

namespace blossom {
namespace {

// The 32 signed codes of block b of a quantized weight row.
void WeightCodes(const void* w, DType w_dtype, int64_t b, int8_t codes[kQuantBlock],
                 float* scale) {
  if (w_dtype == DType::kQ8G32) {
    const Q8Block& block = static_cast<const Q8Block*>(w)[b];
    *scale = block.scale;
    for (int i = 0; i < kQuantBlock; ++i) codes[i] = block.codes[i];
    return;
  }
  const Q4Block& block = static_cast<const Q4Block*>(w)[b];
  *scale = block.scale;
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    codes[j] = static_cast<int8_t>((block.nibbles[j] & 0xF) - 8);
    codes[j + kQuantBlock / 2] = static_cast<int8_t>((block.nibbles[j] >> 4) - 8);
  }
}

}  // namespace

void QuantDotTilePortable(const Q8Block* x, int64_t ldx, int rows, const void* w, DType w_dtype,
                          int cols, int64_t k, float* dots, int64_t ldd) {
  const int64_t blocks = k / kQuantBlock;
  const size_t row_bytes = DTypeBytes(w_dtype, k);
  for (int c = 0; c < cols; ++c) {
    const void* wc = static_cast<const char*>(w) + c * row_bytes;
    for (int r = 0; r < rows; ++r) {
      const Q8Block* xr = x + r * ldx;
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int8_t codes[kQuantBlock];
        float w_scale;
        WeightCodes(wc, w_dtype, b, codes, &w_scale);
        const float d = xr[b].scale * w_scale;
        int32_t dot = 0;
        for (int i = 0; i < kQuantBlock; ++i) dot += int32_t{xr[b].codes[i]} * codes[i];
        // Multiply, then add (built with -ffp-contract=off): the AVX2 path's two roundings.
        const float product = static_cast<float>(dot) * d;
        acc = acc + product;
      }
      dots[r * ldd + c] = acc;
    }
  }
}

}  // namespace blossom
