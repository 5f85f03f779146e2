// Element types and the float conversions every backend shares.
//
// Dtype is a runtime property of a tensor (never a template parameter): kernels dispatch on it
// internally. Half-precision conversions round to nearest-even, matching PyTorch's casts, so that
// values written here compare bit-for-bit with Hugging Face's.
#ifndef BLOSSOM_KERNELS_DTYPE_H_
#define BLOSSOM_KERNELS_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI32 = 3,
  kI64 = 4,
  // Block-quantized weights (made at load time by a backend, never read from a checkpoint): each
  // row of K elements is K / 32 blocks of 32, a block being an fp32 scale followed by its 32
  // symmetric integer codes (value = scale * code). Layouts in kernels/cpu/quant.h.
  kQ8G32 = 5,  // int8 codes in [-127, 127]: 4 + 32 = 36 bytes per block
  kQ4G32 = 6,  // int4 codes in [-8, 7], two per byte: 4 + 16 = 20 bytes per block
  // Float weights repacked at load time for the CPU GEMM (never read from a checkpoint): an [n, k]
  // matrix (k a multiple of 8) with rows 2p and 2p + 1 interleaved 8 elements at a time; the same
  // elements and bytes as the row-major dtype, another order (layout and why in
  // kernels/cpu/weight_pairs.h).
  kF32Pairs = 7,
  kF16Pairs = 8,
  kBF16Pairs = 9,
  // kQ8G32's blocks repacked at load time for the CPU's AVX512-VNNI GEMM (never read from a
  // checkpoint): an [n, k] matrix (n a multiple of 16) as panels of 16 rows, each block of a panel
  // the 16 rows' codes interleaved 4 bytes at a time (as unsigned code + 128), then their 16
  // scales. The same 36 bytes per 32 weights as kQ8G32 (layout and why in kernels/cpu/quant.h).
  kQ8G32Panel16 = 10,
  // BF16 weights packed at load time for the CPU's bf16-activation GEMM (--quantize bf16; never
  // read from a checkpoint): an [n, k] matrix (n a multiple of 16, k even) as panels of 16 rows,
  // each panel's rows interleaved 2 elements at a time (element pair j of the 16 rows in one 64-byte
  // line). The same 2 bytes per weight as kBF16 (layout and why in kernels/cpu/bf16_panel_tile.h).
  kBF16Panel16 = 11,
  // kQ4G32's blocks repacked the same way for the AVX512-VNNI GEMM: panels of 16 rows, each block
  // the 16 rows' nibble bytes interleaved 4 at a time, then their 16 scales; the same 20 bytes per
  // 32 weights as kQ4G32 (layout in kernels/cpu/quant.h).
  kQ4G32Panel16 = 12,
};

// Bytes per element of an unblocked dtype; 0 for the block-quantized ones (use DTypeBytes).
size_t DTypeSize(DType dtype);
// Elements per block: 32 for the block-quantized dtypes, 1 for the others.
int64_t DTypeBlockElems(DType dtype);
// Bytes of n elements (n a multiple of DTypeBlockElems).
size_t DTypeBytes(DType dtype, int64_t n);
// "f32", "f16", "bf16", "i32", "i64", "q8g32", "q4g32", "f32-pairs", "f16-pairs",
// "bf16-pairs", "q8g32-panel16", "bf16-panel16", "q4g32-panel16".
const char* DTypeName(DType dtype);
// Parses a user-facing name ("float32"/"fp32"/"f32", "float16"/"fp16"/"f16", "bfloat16"/"bf16").
absl::StatusOr<DType> ParseDType(absl::string_view name);
// Parses a --kv-cache-dtype value: "auto" (nullopt: the backend's activation dtype) or a dtype
// name ParseDType accepts; InvalidArgument naming the value and the accepted ones otherwise.
absl::StatusOr<std::optional<DType>> ParseKvCacheDtype(absl::string_view name);

// True for the floating-point types.
inline bool IsFloat(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

inline float BF16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

// Round-to-nearest-even; NaN stays a (quiet) NaN.
inline uint16_t FloatToBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);  // round-to-nearest-even, overflow to inf

inline bool IsBlockQuantized(DType dtype) {
  return dtype == DType::kQ8G32 || dtype == DType::kQ4G32 || dtype == DType::kQ8G32Panel16 ||
         dtype == DType::kQ4G32Panel16;
}

// True for the row-paired float weights; PairedElementDType gives their element dtype (F32, F16
// or BF16), PairsOf the row-paired dtype of a float dtype.
inline bool IsRowPaired(DType dtype) {
  return dtype == DType::kF32Pairs || dtype == DType::kF16Pairs || dtype == DType::kBF16Pairs;
}
inline DType PairedElementDType(DType packed) {
  return packed == DType::kF16Pairs    ? DType::kF16
         : packed == DType::kBF16Pairs ? DType::kBF16
                                        : DType::kF32;
}
inline DType PairsOf(DType element) {
  return element == DType::kF16    ? DType::kF16Pairs
         : element == DType::kBF16 ? DType::kBF16Pairs
                                   : DType::kF32Pairs;
}

// Element `index` of a float-dtype buffer (F32, F16 or BF16) as fp32.
inline float LoadAsFloat(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16:
      return BF16ToFloat(static_cast<const uint16_t*>(data)[index]);
    default:
      return static_cast<const float*>(data)[index];
  }
}

// Converts n elements of a float dtype (F32, F16, BF16) to fp32.
void ConvertToF32(const void* src, DType src_dtype, float* dst, size_t n);
// Converts n fp32 values to a float dtype (F32, F16, BF16).
void ConvertFromF32(const float* src, void* dst, DType dst_dtype, size_t n);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_DTYPE_H_
