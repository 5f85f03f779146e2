#include "engine/loader/weight_copy.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace blossom {

absl::StatusOr<Tensor> CopyWeightBlock(const Tensor& src, int64_t row_begin, int64_t row_end,
                                       int64_t col_begin, int64_t col_end, DType dtype,
                                       std::vector<char>* storage) {
  if (src.rank < 1 || DTypeBlockElems(src.dtype) != 1 || DTypeBlockElems(dtype) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyWeightBlock: needs an unblocked tensor of rank >= 1, got ",
                     DTypeName(src.dtype), " ", src.ShapeString(), " to ", DTypeName(dtype)));
  }
  if (src.dtype != dtype && !(IsFloat(src.dtype) && IsFloat(dtype))) {
    return absl::InvalidArgumentError(absl::StrCat("CopyWeightBlock: cannot convert ",
                                                   DTypeName(src.dtype), " to ", DTypeName(dtype),
                                                   " (only between float dtypes)"));
  }
  const int64_t rows = src.dim(0);
  const int64_t width = rows > 0 ? src.numel() / rows : 0;
  const bool whole_rows = col_begin == 0 && col_end == width;
  if (row_begin < 0 || row_end < row_begin || row_end > rows || col_begin < 0 ||
      col_end < col_begin || col_end > width || (!whole_rows && src.rank != 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyWeightBlock: rows [", row_begin, ", ", row_end, ") and columns [", col_begin, ", ",
        col_end, ") are not a block of ", src.ShapeString(),
        " (a column slice needs a rank-2 tensor)"));
  }
  const int64_t out_rows = row_end - row_begin, cols = col_end - col_begin;
  const size_t src_elem = DTypeSize(src.dtype), dst_elem = DTypeSize(dtype);
  storage->assign(static_cast<size_t>(out_rows * cols) * dst_elem, 0);
  Tensor out = src;
  out.data = storage->data();
  out.dtype = dtype;
  out.device = DeviceKind::kHost;
  out.shape[0] = out_rows;
  if (!whole_rows) out.shape[1] = cols;
  const char* base = static_cast<const char*>(src.data);
  if (src.dtype == dtype && whole_rows) {
    // Contiguous in the source: one copy.
    if (!storage->empty()) {
      std::memcpy(storage->data(), base + row_begin * width * src_elem, storage->size());
    }
    return out;
  }
  // Row by row. Converting goes through aligned scratch: the source may be misaligned, and the
  // conversions read it as uint16_t / float.
  std::vector<float> scratch(src.dtype == dtype ? 0 : static_cast<size_t>(cols));
  std::vector<char> raw(src.dtype == dtype ? 0 : static_cast<size_t>(cols) * src_elem);
  for (int64_t r = 0; r < out_rows; ++r) {
    const char* from = base + ((row_begin + r) * width + col_begin) * src_elem;
    char* to = storage->data() + r * cols * dst_elem;
    if (src.dtype == dtype) {
      std::memcpy(to, from, cols * src_elem);
      continue;
    }
    std::memcpy(raw.data(), from, raw.size());
    ConvertToF32(raw.data(), src.dtype, scratch.data(), scratch.size());
    ConvertFromF32(scratch.data(), to, dtype, scratch.size());
  }
  return out;
}

absl::StatusOr<Tensor> CopyWeight(const Tensor& src, DType dtype, std::vector<char>* storage) {
  const int64_t rows = src.rank > 0 ? src.dim(0) : 0;
  const int64_t width = rows > 0 ? src.numel() / rows : 0;
  return CopyWeightBlock(src, 0, rows, 0, width, dtype, storage);
}

}  // namespace blossom
