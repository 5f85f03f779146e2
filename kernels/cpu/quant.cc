#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace blossom {
namespace {

void QuantizeQ8(const float* x, Q8Block* out) {
  float amax = 0.0f;
  for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  out->scale = scale;
  for (int i = 0; i < kQuantBlock; ++i) {
    // lrintf rounds to nearest even in the default rounding mode; the clamp only guards the last
    // ulp of x * inverse at the block maximum.
    const long code = std::lrintf(x[i] * inverse);
    out->codes[i] = static_cast<int8_t>(std::clamp<long>(code, -127, 127));
  }
}

void QuantizeQ4(const float* x, Q4Block* out) {
  float extreme = 0.0f;  // the value of largest magnitude, with its sign
  for (int i = 0; i < kQuantBlock; ++i)
    if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
  const float scale = extreme / -8.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  out->scale = scale;
  uint8_t codes[kQuantBlock];
  for (int i = 0; i < kQuantBlock; ++i) {
    const long code = std::clamp<long>(std::lrintf(x[i] * inverse), -8, 7);
    codes[i] = static_cast<uint8_t>(code + 8);
  }
  for (int j = 0; j < kQuantBlock / 2; ++j)
    out->nibbles[j] = static_cast<uint8_t>(codes[j] | (codes[j + kQuantBlock / 2] << 4));
}

}  // namespace

absl::Status QuantizeWeightRows(const void* w, DType w_dtype, int64_t rows, int64_t k,
                                DType out_dtype, void* out) {
  if (!IsFloat(w_dtype) || !IsBlockQuantized(out_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot quantize ", DTypeName(w_dtype),
                                                   " weights to ", DTypeName(out_dtype)));
  }
  if (k % kQuantBlock != 0 || k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot quantize a weight of row length ", k, " to ", DTypeName(out_dtype),
                     ": the row length must be a positive multiple of ", kQuantBlock));
  }
  const size_t in_row = DTypeBytes(w_dtype, k), out_row = DTypeBytes(out_dtype, k);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    ConvertToF32(static_cast<const char*>(w) + r * in_row, w_dtype, row.data(), row.size());
    char* dst = static_cast<char*>(out) + r * out_row;
    for (int64_t b = 0; b < k / kQuantBlock; ++b) {
      if (out_dtype == DType::kQ8G32) {
        QuantizeQ8(row.data() + b * kQuantBlock, reinterpret_cast<Q8Block*>(dst) + b);
      } else {
        QuantizeQ4(row.data() + b * kQuantBlock, reinterpret_cast<Q4Block*>(dst) + b);
      }
    }
  }
  return absl::OkStatus();
}

void QuantizeActivationRow(const float* x, int64_t k, Q8Block* out) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) QuantizeQ8(x + b * kQuantBlock, out + b);
}

float DequantizeAt(const void* row, DType dtype, int64_t i) {
  const int64_t b = i / kQuantBlock, j = i % kQuantBlock;
  if (dtype == DType::kQ8G32) {
    const Q8Block& block = static_cast<const Q8Block*>(row)[b];
    return block.scale * block.codes[j];
  }
  const Q4Block& block = static_cast<const Q4Block*>(row)[b];
  const int half = kQuantBlock / 2;
  const uint8_t byte = block.nibbles[j % half];
  const int code = (j < half ? (byte & 0xF) : (byte >> 4)) - 8;
  return block.scale * static_cast<float>(code);
}

}  // namespace blossom
