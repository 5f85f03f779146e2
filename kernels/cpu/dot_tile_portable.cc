#include <cmath>

#include "kernels/cpu/dot_tile.h"

namespace blossom {

void DotTilePortable(const float* x, int64_t ldx, int rows, const void* w, DType w_dtype, int cols,
                     int64_t k, float* dots, int64_t ldd) {
  const int64_t k4 = k & ~int64_t{3};
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(w_dtype);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    for (int c = 0; c < cols; ++c) {
      const void* wc = static_cast<const char*>(w) + c * row_bytes;
      // A product of two fp32 values is exact in fp64, so multiply-then-add rounds once, exactly
      // like the AVX2 path's FMA: same bits, and no software fma on CPUs without one.
      double lanes[4] = {0, 0, 0, 0};
      for (int64_t i = 0; i < k4; i += 4)
        for (int l = 0; l < 4; ++l)
          lanes[l] += static_cast<double>(xr[i + l]) *
                      static_cast<double>(LoadAsFloat(wc, w_dtype, i + l));
      dots[r * ldd + c] = FinishDot(lanes, xr, wc, w_dtype, k4, k);
    }
  }
}

}  // namespace blossom
