// Read-only, zero-copy access to safetensors files.
//
// Format: 8-byte little-endian u64 N, N bytes of UTF-8 JSON (possibly padded with spaces) mapping
// tensor name -> {dtype, shape, data_offsets [begin, end) relative to the data section} plus an
// optional "__metadata__" string map, then the data section. Tensors are row-major little-endian
// and must tile the data section exactly: no holes, no overlaps, no trailing bytes.
//
// Checkpoints are untrusted and may be truncated by an interrupted download, so Open validates
// everything the format promises before any tensor is handed out; a View can then never point
// outside the mapping. Weights are never copied here: Views point into the read-only mapping.
//
// Alignment: the format does not promise that a tensor's data sits at a multiple of its element
// size. Writers since safetensors 0.3.0 pad the header to 8 bytes, so data tensors written in
// the usual order are aligned; older ones (2022, e.g. bigscience's own conversions made for TGI)
// did not, so in such a file data starts at 8 + header length, anywhere. PyTorch loads those
// files (it copies), so they are valid: View hands them out only on request
// (Misaligned::kAllow), as views whose bytes must be copied before they are read as numbers.
#ifndef BLOSSOM_ENGINE_LOADER_SAFETENSORS_H_
#define BLOSSOM_ENGINE_LOADER_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"

namespace blossom {

// RAII read-only memory mapping of a whole file. Move-only. An empty file is valid and has
// data() == nullptr, size() == 0 (mmap refuses zero-length mappings).
// Thread-safety: immutable after Open; all const methods may be called concurrently.
// The mapping is PROT_READ: writing through data() faults. If the file is truncated by someone
// else while mapped, touching the lost pages raises SIGBUS; nothing can be done about that short
// of copying, which is exactly what mapping avoids.
class MappedFile {
 public:
  // Errors name `path` and carry the errno text (NotFound, PermissionDenied, ...).
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // madvise over [offset, offset + length), widened to page boundaries. Advice is a hint: the
  // status only reports invalid arguments or kernel refusals.
  absl::Status Advise(uint64_t offset, uint64_t length, int advice) const;

 private:
  void Reset();

  std::string path_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// One tensor of a safetensors file, as declared in the header (validated at Open).
struct TensorEntry {
  std::string name;
  std::string dtype_name;      // as in the file: "F32", "BF16", ...
  std::vector<int64_t> shape;  // every dim >= 0; product * element size == end - begin
  uint64_t begin = 0;          // absolute offsets into the file (header included), [begin, end)
  uint64_t end = 0;

  uint64_t bytes() const { return end - begin; }
};

// Bytes per element of a safetensors dtype name (the whole format's set: F64 F32 F16 BF16 I64 I32
// I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2), or 0 if unknown.
size_t SafetensorsDTypeSize(absl::string_view dtype_name);

// "[2, 3]".
std::string ShapeToString(const std::vector<int64_t>& shape);

// The Tensor dtype View gives a tensor of this safetensors dtype ("F16" -> kF16), or nullopt for
// the dtypes View does not support.
std::optional<DType> ViewableDType(absl::string_view dtype_name);

// What View does with a tensor whose data is not at a multiple of its element size.
enum class Misaligned {
  // FailedPrecondition: the caller dereferences the data as numbers.
  kRefuse,
  // A view anyway. Its data pointer is misaligned for its dtype, so dereferencing it as float*
  // or uint16_t* is undefined behaviour (and a fault in vectorised or GPU copies): read it only
  // bytewise (memcpy, CopyWeightBlock in weight_copy.h). Check with IsAlignedView.
  kAllow,
};

// True if t.data is a multiple of t's element size (always for an empty or byte-sized tensor).
bool IsAlignedView(const Tensor& t);

// An open, validated safetensors file. Created only by Open; not copyable or movable (Views and
// TensorEntry pointers stay valid for the object's lifetime).
// Invariants: entries() are sorted by offset and tile [data_begin(), file size) exactly; names
// are unique; every entry's byte length matches its dtype and shape.
// Thread-safety: immutable after Open; all methods may be called concurrently.
class SafetensorsFile {
 public:
  // Upper bound on the header size, as in the reference implementation: protects against
  // allocating/parsing gigabytes because of a corrupt length prefix.
  static constexpr uint64_t kMaxHeaderBytes = 100000000;

  // Maps and validates `path`. Every error message starts with `path` and names the tensor or
  // field at fault. InvalidArgument for format violations (truncation included), NotFound etc.
  // for I/O problems.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return mapping_.path(); }
  // Sorted by offset (ties, i.e. empty tensors, by name).
  const std::vector<TensorEntry>& entries() const { return entries_; }
  // nullptr if absent.
  const TensorEntry* Find(absl::string_view name) const;
  // The optional "__metadata__" map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Absolute offset of the data section (8 + header length).
  uint64_t data_begin() const { return data_begin_; }
  uint64_t file_size() const { return mapping_.size(); }
  const MappedFile& mapping() const { return mapping_; }
  // How many non-empty tensors of a View-able dtype have data that is not at a multiple of
  // their element size (see the file comment); normally 0 for files written by safetensors
  // 0.3.0 or later.
  size_t misaligned_tensors() const { return misaligned_tensors_; }

  // A host Tensor viewing the entry's bytes inside the mapping (no copy). Supported dtypes: F32,
  // F16, BF16, I32, I64; others are Unimplemented. Also fails for rank > Tensor::kMaxRank, for
  // an entry not belonging to this file, and, unless `misaligned` is kAllow, with
  // FailedPrecondition for data not aligned to its element size. The Tensor's memory is
  // read-only and lives as long as this object.
  absl::StatusOr<Tensor> View(const TensorEntry& entry,
                              Misaligned misaligned = Misaligned::kRefuse) const;

 private:
  explicit SafetensorsFile(MappedFile mapping) : mapping_(std::move(mapping)) {}
  absl::Status ParseAndValidate();

  MappedFile mapping_;
  uint64_t data_begin_ = 0;
  std::vector<TensorEntry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
  size_t misaligned_tensors_ = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_SAFETENSORS_H_
