#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

// A block holding a NaN or an infinity has no scale that represents it: it is stored with a NaN
// scale (and zero codes), so every dot product it enters is NaN, as in the fp32 GEMM, and a
// broken model fails loudly at the sampler ("non-finite logit") instead of producing plausible
// tokens (the max would skip a NaN, the clamp turn it into -127, and +inf would become -inf).
void MarkNonFinite(float* scale, void* codes, size_t code_bytes) {
  *scale = std::numeric_limits<float>::quiet_NaN();
  std::memset(codes, 0, code_bytes);
}

void QuantizeQ8(const float* x, Q8Block* out) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < kQuantBlock; ++i) {
    finite &= std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite) return MarkNonFinite(&out->scale, out->codes, sizeof(out->codes));
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

#if defined(__x86_64__)
// QuantizeQ8 in AVX2, bit-identical: the same non-finite check (|v| not below +inf: NaN or an
// infinity), the same max, the same scalar scale and inverse, the same fp32 product, and
// vcvtps2dq rounds to nearest even in the default mode as lrintf does (the clamp only guards
// the last ulp at the block maximum).
BLOSSOM_AVX2 void QuantizeQ8Avx2(const float* x, Q8Block* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  __m256 nonfinite = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 magnitude = _mm256_and_ps(v[i], abs_mask);
    nonfinite = _mm256_or_ps(nonfinite, _mm256_cmp_ps(magnitude, infinity, _CMP_NLT_UQ));
    amax = _mm256_max_ps(magnitude, amax);
  }
  if (_mm256_movemask_ps(nonfinite) != 0) {
    return MarkNonFinite(&out->scale, out->codes, sizeof(out->codes));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  const float scale = _mm_cvtss_f32(m) / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  out->scale = scale;
  const __m256 inv = _mm256_set1_ps(inverse);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  __m256i c[4];
  for (int i = 0; i < 4; ++i) {
    c[i] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv)), lo), hi);
  }
  // packs work inside 128-bit halves: dword d of the packed result holds codes 4d..4d+3 of
  // c[d % 4]'s half d / 4; the permute puts them back in element order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->codes), ordered);
}
#endif

void QuantizeQ4(const float* x, Q4Block* out) {
  float extreme = 0.0f;  // the value of largest magnitude, with its sign
  bool finite = true;
  for (int i = 0; i < kQuantBlock; ++i) {
    finite &= std::isfinite(x[i]);
    if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
  }
  if (!finite) return MarkNonFinite(&out->scale, out->nibbles, sizeof(out->nibbles));
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
  if (out_dtype == DType::kQ4G32Panel16) {
    if (rows % kQ4PanelRows != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot pack ", rows, " rows into ", DTypeName(out_dtype),
                                                     ": panels hold ", kQ4PanelRows, " rows"));
    }
    const int64_t blocks = k / kQuantBlock;
    std::vector<Q4Block> panel(static_cast<size_t>(kQ4PanelRows * blocks));
    for (int64_t p = 0; p < rows / kQ4PanelRows; ++p) {
      absl::Status s = QuantizeWeightRows(static_cast<const char*>(w) + p * kQ4PanelRows * in_row, w_dtype,
                                          kQ4PanelRows, k, DType::kQ4G32, panel.data());
      if (!s.ok()) return s;
      PackQ4Panels(panel.data(), kQ4PanelRows, blocks, static_cast<char*>(out) + p * kQ4PanelRows * out_row);
    }
    return absl::OkStatus();
  }
  if (out_dtype == DType::kQ8G32Panel16) {
    if (rows % kQ8PanelRows != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot pack ", rows, " rows into ", DTypeName(out_dtype),
                                                     ": panels hold ", kQ8PanelRows, " rows"));
    }
    const int64_t blocks = k / kQuantBlock;
    std::vector<Q8Block> panel(static_cast<size_t>(kQ8PanelRows * blocks));
    for (int64_t p = 0; p < rows / kQ8PanelRows; ++p) {
      for (int r = 0; r < kQ8PanelRows; ++r) {
        ConvertToF32(static_cast<const char*>(w) + (p * kQ8PanelRows + r) * in_row, w_dtype, row.data(),
                     row.size());
        QuantizeActivationRow(row.data(), k, panel.data() + r * blocks);
      }
      PackQ8Panels(panel.data(), kQ8PanelRows, blocks, static_cast<char*>(out) + p * kQ8PanelRows * out_row);
    }
    return absl::OkStatus();
  }
  for (int64_t r = 0; r < rows; ++r) {
    ConvertToF32(static_cast<const char*>(w) + r * in_row, w_dtype, row.data(), row.size());
    char* dst = static_cast<char*>(out) + r * out_row;
    if (out_dtype == DType::kQ8G32) {
      QuantizeActivationRow(row.data(), k, reinterpret_cast<Q8Block*>(dst));
      continue;
    }
    for (int64_t b = 0; b < k / kQuantBlock; ++b)
      QuantizeQ4(row.data() + b * kQuantBlock, reinterpret_cast<Q4Block*>(dst) + b);
  }
  return absl::OkStatus();
}

void PackQ8Panels(const Q8Block* rows_in, int64_t rows, int64_t blocks, void* panels) {
  for (int64_t p = 0; p < rows / kQ8PanelRows; ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* dst = static_cast<uint8_t*>(panels) + (p * blocks + b) * kQ8PanelBlockBytes;
      for (int r = 0; r < kQ8PanelRows; ++r) {
        const Q8Block& block = rows_in[(p * kQ8PanelRows + r) * blocks + b];
        for (int i = 0; i < kQuantBlock; ++i) {
          dst[Q8PanelCodeOffset(r, i)] = static_cast<uint8_t>(block.codes[i] + 128);
        }
        std::memcpy(dst + 512 + r * sizeof(float), &block.scale, sizeof(float));
      }
    }
  }
}

void UnpackQ8Panels(const void* panels, int64_t rows, int64_t blocks, Q8Block* rows_out) {
  for (int64_t p = 0; p < rows / kQ8PanelRows; ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* src = static_cast<const uint8_t*>(panels) + (p * blocks + b) * kQ8PanelBlockBytes;
      for (int r = 0; r < kQ8PanelRows; ++r) {
        Q8Block& block = rows_out[(p * kQ8PanelRows + r) * blocks + b];
        for (int i = 0; i < kQuantBlock; ++i) {
          block.codes[i] = static_cast<int8_t>(src[Q8PanelCodeOffset(r, i)] - 128);
        }
        std::memcpy(&block.scale, src + 512 + r * sizeof(float), sizeof(float));
      }
    }
  }
}

void PackQ4Panels(const Q4Block* rows_in, int64_t rows, int64_t blocks, void* panels) {
  for (int64_t p = 0; p < rows / kQ4PanelRows; ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* dst = static_cast<uint8_t*>(panels) + (p * blocks + b) * kQ4PanelBlockBytes;
      for (int r = 0; r < kQ4PanelRows; ++r) {
        const Q4Block& block = rows_in[(p * kQ4PanelRows + r) * blocks + b];
        for (int j = 0; j < kQuantBlock / 2; ++j) dst[Q4PanelByteOffset(r, j)] = block.nibbles[j];
        std::memcpy(dst + 256 + r * sizeof(float), &block.scale, sizeof(float));
      }
    }
  }
}

void UnpackQ4Panels(const void* panels, int64_t rows, int64_t blocks, Q4Block* rows_out) {
  for (int64_t p = 0; p < rows / kQ4PanelRows; ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* src = static_cast<const uint8_t*>(panels) + (p * blocks + b) * kQ4PanelBlockBytes;
      for (int r = 0; r < kQ4PanelRows; ++r) {
        Q4Block& block = rows_out[(p * kQ4PanelRows + r) * blocks + b];
        for (int j = 0; j < kQuantBlock / 2; ++j) block.nibbles[j] = src[Q4PanelByteOffset(r, j)];
        std::memcpy(&block.scale, src + 256 + r * sizeof(float), sizeof(float));
      }
    }
  }
}

void QuantizeActivationRow(const float* x, int64_t k, Q8Block* out) {
  if (CpuHasAvx2Fma()) {
    QuantizeActivationRowAvx2(x, k, out);
  } else {
    QuantizeActivationRowPortable(x, k, out);
  }
}

void QuantizeActivationRowPortable(const float* x, int64_t k, Q8Block* out) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) QuantizeQ8(x + b * kQuantBlock, out + b);
}

void QuantizeActivationRowAvx2(const float* x, int64_t k, Q8Block* out) {
#if defined(__x86_64__)
  for (int64_t b = 0; b < k / kQuantBlock; ++b) QuantizeQ8Avx2(x + b * kQuantBlock, out + b);
#else
  QuantizeActivationRowPortable(x, k, out);
#endif
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
