#include "kernels/dtype.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace blossom {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
    case DType::kF32Pairs:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kF16Pairs:
    case DType::kBF16Pairs:
    case DType::kBF16Panel16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kQ8G32:
    case DType::kQ4G32:
    case DType::kQ8G32Panel16:
    case DType::kQ4G32Panel16:
      return 0;
  }
  return 0;
}

int64_t DTypeBlockElems(DType dtype) { return IsBlockQuantized(dtype) ? 32 : 1; }

size_t DTypeBytes(DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kQ8G32:
    case DType::kQ8G32Panel16:
      return static_cast<size_t>(n / 32) * 36;
    case DType::kQ4G32:
    case DType::kQ4G32Panel16:
      return static_cast<size_t>(n / 32) * 20;
    default:
      return static_cast<size_t>(n) * DTypeSize(dtype);
  }
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kQ8G32:
      return "q8g32";
    case DType::kQ4G32:
      return "q4g32";
    case DType::kF32Pairs:
      return "f32-pairs";
    case DType::kF16Pairs:
      return "f16-pairs";
    case DType::kBF16Pairs:
      return "bf16-pairs";
    case DType::kQ8G32Panel16:
      return "q8g32-panel16";
    case DType::kBF16Panel16:
      return "bf16-panel16";
    case DType::kQ4G32Panel16:
      return "q4g32-panel16";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  if (lower == "float32" || lower == "fp32" || lower == "f32") return DType::kF32;
  if (lower == "float16" || lower == "fp16" || lower == "f16" || lower == "half") return DType::kF16;
  if (lower == "bfloat16" || lower == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected float32, float16 or bfloat16)"));
}

absl::StatusOr<std::optional<DType>> ParseKvCacheDtype(absl::string_view name) {
  if (name == "auto") return std::optional<DType>();
  absl::StatusOr<DType> dtype = ParseDType(name);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown --kv-cache-dtype value '", name,
                                                   "' (expected auto, float32, float16 or bfloat16)"));
  }
  return std::optional<DType>(*dtype);
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | static_cast<uint32_t>(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in half: scale by 2^24 using float arithmetic, which rounds to nearest-even.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
    float magnitude;
    std::memcpy(&magnitude, &abs, sizeof(magnitude));
    float scaled = magnitude * 16777216.0f;  // exact: 2^24 * value, then rounded when converted
    uint32_t rounded = static_cast<uint32_t>(scaled);
    float remainder = scaled - static_cast<float>(rounded);
    if (remainder > 0.5f || (remainder == 0.5f && (rounded & 1u))) ++rounded;
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias exponent and round the 13 dropped mantissa bits to nearest-even.
  uint32_t rebased = abs - ((127u - 15u) << 23);
  uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
}

void ConvertToF32(const void* src, DType src_dtype, float* dst, size_t n) {
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const uint16_t* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(in[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* in = static_cast<const uint16_t*>(src);
      size_t i = 0;
#if defined(__SSE2__)
      // The bf16 bits become the floats' top halves: 8 at a time with two interleaves against
      // zero (baseline x86-64; -O2 leaves the scalar loop unvectorised, and the CPU backend's bf16
      // KV cache widens every row it attends over).
      const __m128i zero = _mm_setzero_si128();
      for (; i + 8 <= n; i += 8) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_unpacklo_epi16(zero, v));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 4), _mm_unpackhi_epi16(zero, v));
      }
#endif
      for (; i < n; ++i) dst[i] = BF16ToFloat(in[i]);
      return;
    }
    default:
      return;  // callers only pass float dtypes (checked where tensors are created)
  }
}

void ConvertFromF32(const float* src, void* dst, DType dst_dtype, size_t n) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = FloatToBF16(src[i]);
      return;
    }
    default:
      return;
  }
}

}  // namespace blossom
