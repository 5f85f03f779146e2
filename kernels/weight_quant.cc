#include "kernels/weight_quant.h"

#include "absl/strings/str_cat.h"

namespace blossom {

const char* WeightQuantName(WeightQuant quant) {
  switch (quant) {
    case WeightQuant::kInt8:
      return "int8";
    case WeightQuant::kInt4:
      return "int4";
    default:
      return "none";
  }
}

absl::StatusOr<WeightQuant> ParseWeightQuant(absl::string_view name) {
  if (name == "none") return WeightQuant::kNone;
  if (name == "int8") return WeightQuant::kInt8;
  if (name == "int4") return WeightQuant::kInt4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --quantize value '", name, "' (expected none, int8 or int4)"));
}

DType QuantizedDType(WeightQuant quant) {
  return quant == WeightQuant::kInt4 ? DType::kQ4G32 : DType::kQ8G32;
}

}  // namespace blossom
