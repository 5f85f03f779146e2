#include "kernels/backend.h"

#include "absl/strings/str_cat.h"

namespace blossom {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = other.owner_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->Free(data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

size_t KvCacheSpec::BytesPerBlock() const {
  return 2ull * num_layers * block_size * num_heads * head_dim * DTypeSize(dtype);
}

absl::StatusOr<OwnedTensor> Backend::AllocateTensor(DType dtype,
                                                    std::initializer_list<int64_t> shape) {
  Tensor t(nullptr, dtype, shape, device());
  absl::StatusOr<DeviceBuffer> buffer = Allocate(t.bytes());
  if (!buffer.ok()) return buffer.status();
  t.data = buffer->data();
  OwnedTensor owned;
  owned.tensor = t;
  owned.storage = std::move(*buffer);
  return owned;
}

absl::StatusOr<OwnedTensor> Backend::ImportLinearWeight(const Tensor& host, WeightQuant quant) {
  if (quant == WeightQuant::kNone) return ImportWeight(host);
  return absl::UnimplementedError(absl::StrCat("--quantize ", WeightQuantName(quant),
                                               " is not implemented on the ", name(),
                                               " backend (only the cpu backend quantizes)"));
}

}  // namespace blossom
