#include <cmath>

#include "kernels/cpu/dot_tile.h"

namespace blossom {

void DotTilePortable(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                     int64_t k, float* dots, int64_t ldd) {
  const int64_t k8 = k & ~int64_t{7};
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(w_dtype);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    for (int c = 0; c < cols; ++c) {
      const void* wc = static_cast<const char*>(w) + c * row_bytes;
      double acc[4] = {0, 0, 0, 0};
      for (int64_t b = 0; b < k8; b += kDotBlock) {
        const int64_t end = b + kDotBlock < k8 ? b + kDotBlock : k8;
        float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t i = b; i < end; i += 8)
          for (int l = 0; l < 8; ++l)
            lane[l] = std::fma(xr[i + l], LoadAsFloat(wc, w_dtype, i + l), lane[l]);
        for (int l = 0; l < 4; ++l)
          acc[l] += static_cast<double>(lane[l]) + static_cast<double>(lane[l + 4]);
      }
      dots[r * ldd + c] = FinishDot(acc, xr, wc, w_dtype, k8, k);
    }
  }
}

}  // namespace blossom
