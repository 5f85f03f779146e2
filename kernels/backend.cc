#include "kernels/backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

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

KvCache::KvCache() {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
}

absl::StatusOr<HostBuffer> Backend::AllocateHostStaging(size_t bytes) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  return HostBuffer(p, [](void* q) { std::free(q); });
}

absl::Status RefusedWhileCapturing(absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " inside a step capture (a captured step cannot copy, allocate or wait)"));
}

absl::Status Backend::BeginCapture() {
  return absl::UnimplementedError(absl::StrCat("the ", name(), " backend cannot capture steps"));
}

absl::StatusOr<std::unique_ptr<StepGraph>> Backend::EndCapture() {
  return absl::UnimplementedError(absl::StrCat("the ", name(), " backend cannot capture steps"));
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

absl::Status CheckCopyColumns(const Tensor& src, const Tensor& dst, int64_t col_begin) {
  if (src.rank != 2 || dst.rank != 2 || src.dtype != dst.dtype || src.dim(0) != dst.dim(0) ||
      col_begin < 0 || col_begin + src.dim(1) > dst.dim(1) || IsBlockQuantized(src.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyColumns: cannot place ", DTypeName(src.dtype), " ", src.ShapeString(),
        " at column ", col_begin, " of ", DTypeName(dst.dtype), " ", dst.ShapeString()));
  }
  return absl::OkStatus();
}

absl::Status Backend::CopyColumns(const Tensor& src, Tensor dst, int64_t col_begin) {
  if (device() != DeviceKind::kHost) {
    return absl::UnimplementedError(
        absl::StrCat("CopyColumns is not implemented on the ", name(), " backend"));
  }
  absl::Status valid = CheckCopyColumns(src, dst, col_begin);
  if (!valid.ok()) return valid;
  const int64_t rows = src.dim(0);
  const size_t width = DTypeBytes(src.dtype, src.dim(1));
  const size_t dst_pitch = DTypeBytes(dst.dtype, dst.dim(1));
  const size_t offset = DTypeBytes(dst.dtype, col_begin);
  if (width == 0) return absl::OkStatus();
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(dst.data) + r * dst_pitch + offset,
                static_cast<const char*>(src.data) + r * width, width);
  }
  return absl::OkStatus();
}

absl::StatusOr<OwnedTensor> Backend::ImportEmbeddingAndLinearWeight(const Tensor& host,
                                                                    const HostRowsDone&) {
  return ImportWeight(host);
}

absl::StatusOr<OwnedTensor> Backend::ImportLinearWeight(const Tensor& host, WeightQuant quant,
                                                        const HostRowsDone&) {
  if (quant == WeightQuant::kNone) return ImportWeight(host);
  return absl::UnimplementedError(absl::StrCat("--quantize ", WeightQuantName(quant),
                                               " is not implemented on the ", name(),
                                               " backend (only the cpu backend quantizes)"));
}

}  // namespace blossom
