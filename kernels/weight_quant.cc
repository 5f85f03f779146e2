#include "kernels/weight_quant.h"

#include "absl/strings/str_cat.h"

namespace blossom {

const char* WeightQuantName(WeightQuant quant) {
  switch (quant) {
    case WeightQuant::kInt8:
      return "int8";
    case WeightQuant::kInt4:
      return "int4";
    case WeightQuant::kBf16:
      return "bf16";
    default:
      return "none";
  }
}

absl::StatusOr<WeightQuant> ParseWeightQuant(absl::string_view name) {
  if (name == "none") return WeightQuant::kNone;
  if (name == "int8") return WeightQuant::kInt8;
  if (name == "int4") return WeightQuant::kInt4;
  if (name == "bf16") return WeightQuant::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --quantize value '", name, "' (expected none, int8, int4 or bf16)"));
}

DType QuantizedDType(WeightQuant quant) {
  switch (quant) {
    case WeightQuant::kInt4:
      return DType::kQ4G32;
    case WeightQuant::kBf16:
      return DType::kBF16;
    default:
      return DType::kQ8G32;
  }
}

}  // namespace blossom
