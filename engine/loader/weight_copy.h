// Host copies of (slices of) checkpoint weights, for the two cases a zero-copy view of the
// mapping cannot serve:
//  - data misaligned for its dtype (safetensors files written before 0.3.0 did not pad the
//    header; see safetensors.h): a view may only be read bytewise, so it is copied into aligned
//    memory;
//  - a weight whose dtype differs from the one the model computes in (a checkpoint mixing F16
//    and F32 Linear weights): it is converted while copied.
// Only the block asked for is copied (a tensor-parallel rank's row or column slice), never the
// whole tensor, so the copy costs no more than the slice the backend would copy anyway.
#ifndef BLOSSOM_ENGINE_LOADER_WEIGHT_COPY_H_
#define BLOSSOM_ENGINE_LOADER_WEIGHT_COPY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace blossom {

// Copies rows [row_begin, row_end) and columns [col_begin, col_end) of the host tensor `src`,
// seen as a matrix [dim(0), numel / dim(0)], into `storage` (resized; its heap buffer holds the
// copy, aligned for any element type, and survives moving the vector) as `dtype`, and returns a
// Tensor over it: src's shape with dim(0) = row_end - row_begin, and for a column slice (only of
// a rank-2 tensor) dim(1) = col_end - col_begin. `src.data` may be misaligned: it is only read
// with memcpy. A dtype change needs float dtypes on both sides (F32, F16, BF16; rounding to
// nearest-even as dtype.h's conversions). InvalidArgument for ranges outside src, a column slice
// of a tensor that is not rank 2, or a conversion between non-float dtypes.
absl::StatusOr<Tensor> CopyWeightBlock(const Tensor& src, int64_t row_begin, int64_t row_end,
                                       int64_t col_begin, int64_t col_end, DType dtype,
                                       std::vector<char>* storage);

// All of `src`'s rows and columns (CopyWeightBlock of the whole tensor).
absl::StatusOr<Tensor> CopyWeight(const Tensor& src, DType dtype, std::vector<char>* storage);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_WEIGHT_COPY_H_
