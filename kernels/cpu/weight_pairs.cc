#include "kernels/cpu/weight_pairs.h"

#include <cstring>

namespace blossom {

void PackPairRows(const void* rows, DType dtype, int64_t n, int64_t k, int64_t row_begin,
                  int64_t row_end, void* packed) {
  const size_t elem = DTypeSize(dtype), chunk = 8 * elem;
  const char* src = static_cast<const char*>(rows);
  char* dst = static_cast<char*>(packed);
  for (int64_t c = row_begin; c < row_end; ++c) {
    const char* row = src + c * k * elem;
    // Chunk j of an even row lands 16 elements past its chunk j - 1, its partner 8 past that.
    for (int64_t i = 0; i < k; i += 8)
      std::memcpy(dst + PairElementIndex(n, k, c, i) * elem, row + i * elem, chunk);
  }
}

void UnpackPairRows(const void* packed, DType dtype, int64_t n, int64_t k, int64_t c0,
                    int64_t count, void* out) {
  const size_t elem = DTypeSize(dtype), chunk = 8 * elem;
  const char* src = static_cast<const char*>(packed);
  char* dst = static_cast<char*>(out);
  for (int64_t r = 0; r < count; ++r)
    for (int64_t i = 0; i < k; i += 8)
      std::memcpy(dst + (r * k + i) * elem, src + PairElementIndex(n, k, c0 + r, i) * elem, chunk);
}

void PairedRowToF32(const void* packed, DType dtype, int64_t n, int64_t k, int64_t c, float* out) {
  const size_t elem = DTypeSize(dtype);
  const char* src = static_cast<const char*>(packed);
  for (int64_t i = 0; i < k; i += 8)
    ConvertToF32(src + PairElementIndex(n, k, c, i) * elem, dtype, out + i, 8);
}

}  // namespace blossom
