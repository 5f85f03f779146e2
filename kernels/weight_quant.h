// The weight quantization a user asks for (--quantize), shared by the backends, the engine and
// the front ends. A backend turns it into a block-quantized dtype at load time
// (Backend::ImportLinearWeight); the checkpoint itself is never quantized.
#ifndef BLOSSOM_KERNELS_WEIGHT_QUANT_H_
#define BLOSSOM_KERNELS_WEIGHT_QUANT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"

namespace blossom {

enum class WeightQuant : uint8_t {
  kNone = 0,  // weights in their checkpoint dtype
  kInt8 = 1,  // DType::kQ8G32: int8, one fp32 scale per 32 weights of a row
  kInt4 = 2,  // DType::kQ4G32: int4, one fp32 scale per 32 weights of a row
  // bf16 weights (an f32 or f16 checkpoint's rounded to nearest even) multiplied with activations
  // rounded to bf16 at each GEMM, fp32 accumulation: the numerics of a bf16 model in transformers
  // or llama.cpp, run by the CPU's AVX512-BF16 dot products (kernels/cpu/bf16_panel_tile.h).
  kBf16 = 3,
};

// "none", "int8", "int4", "bf16".
const char* WeightQuantName(WeightQuant quant);
// Parses a --quantize value; InvalidArgument naming the value and the accepted ones otherwise.
absl::StatusOr<WeightQuant> ParseWeightQuant(absl::string_view name);
// The dtype a quantized weight is stored in (kInt8 -> kQ8G32, kInt4 -> kQ4G32, kBf16 -> kBF16);
// kNone: none.
DType QuantizedDType(WeightQuant quant);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_WEIGHT_QUANT_H_
