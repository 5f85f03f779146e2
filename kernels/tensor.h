// A non-owning, typed, row-major view of memory on some device.
//
// Tensors never own memory: weights are views into memory-mapped checkpoints (CPU) or into device
// buffers owned by the model; activations are views into buffers owned by the caller. A Tensor is
// a value type and cheap to copy.
#ifndef BLOSSOM_KERNELS_TENSOR_H_
#define BLOSSOM_KERNELS_TENSOR_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/dtype.h"

namespace blossom {

enum class DeviceKind : uint8_t { kHost = 0, kCuda = 1 };

struct Tensor {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::kF32;
  DeviceKind device = DeviceKind::kHost;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};

  Tensor() = default;
  Tensor(void* data_in, DType dtype_in, std::initializer_list<int64_t> dims,
         DeviceKind device_in = DeviceKind::kHost)
      : data(data_in), dtype(dtype_in), device(device_in), rank(static_cast<int>(dims.size())) {
    int i = 0;
    for (int64_t d : dims) shape[i++] = d;
  }

  int64_t dim(int i) const { return shape[i < 0 ? rank + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return DTypeBytes(dtype, numel()); }
  bool empty() const { return data == nullptr; }

  // Rows [begin, end) of the leading dimension: contiguous, so a view.
  Tensor Rows(int64_t begin, int64_t end) const {
    Tensor out = *this;
    out.shape[0] = end - begin;
    int64_t row_elems = rank > 0 ? numel() / shape[0] : 0;
    out.data = static_cast<char*>(data) + begin * static_cast<int64_t>(DTypeBytes(dtype, row_elems));
    return out;
  }
  // Same memory, new shape (the element count must match; callers guarantee it).
  Tensor Reshaped(std::initializer_list<int64_t> dims) const {
    Tensor out(data, dtype, dims, device);
    return out;
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }

  std::string ShapeString() const;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_TENSOR_H_
