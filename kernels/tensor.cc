#include "kernels/tensor.h"

#include "absl/strings/str_cat.h"

namespace blossom {

std::string Tensor::ShapeString() const {
  std::string out = "[";
  for (int i = 0; i < rank; ++i) absl::StrAppend(&out, i ? ", " : "", shape[i]);
  return out + "]";
}

}  // namespace blossom
