#include "engine/loader/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/loader/file_util.h"
#include "engine/loader/json_util.h"
#include "engine/text/utf8.h"
#include "nlohmann/json.hpp"

namespace blossom {

// ---------------------------------------------------------------------------------------------
// MappedFile

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<uint64_t>(st.st_size);
  if (file.size_ > 0) {
    // MAP_PRIVATE + PROT_READ: pages come straight from the page cache and are shared with other
    // processes mapping the same checkpoint; nothing is ever copied.
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      file.size_ = 0;
      return ErrnoToStatus(err, absl::StrCat("cannot mmap ", path, " (", st.st_size, " bytes)"));
    }
    file.data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

absl::Status MappedFile::Advise(uint64_t offset, uint64_t length, int advice) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": madvise range [", offset, ", +",
                                                   length, ") outside the file (", size_,
                                                   " bytes)"));
  }
  if (length == 0) return absl::OkStatus();
  // madvise needs a page-aligned start; the mapping itself starts on a page boundary.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t start = offset / page * page;
  if (::madvise(data_ + start, offset + length - start, advice) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("madvise on ", path_));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

size_t SafetensorsDTypeSize(absl::string_view name) {
  static const auto* sizes = new absl::flat_hash_map<std::string, size_t>{
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes->find(name);
  return it == sizes->end() ? 0 : it->second;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::optional<DType> ViewableDType(absl::string_view dtype_name) {
  if (dtype_name == "F32") return DType::kF32;
  if (dtype_name == "F16") return DType::kF16;
  if (dtype_name == "BF16") return DType::kBF16;
  if (dtype_name == "I32") return DType::kI32;
  if (dtype_name == "I64") return DType::kI64;
  return std::nullopt;
}

bool IsAlignedView(const Tensor& t) {
  if (t.numel() == 0) return true;  // nothing is ever read through it
  const size_t element_size = DTypeSize(t.dtype);
  return element_size <= 1 || reinterpret_cast<uintptr_t>(t.data) % element_size == 0;
}

namespace {

using nlohmann::json;

absl::Status Invalid(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

std::string Quoted(absl::string_view name) {
  return absl::StrCat("'", SanitizeForMessage(name), "'");
}

// Validates one header entry (everything that can be checked without looking at its neighbours).
absl::StatusOr<TensorEntry> ParseEntry(const std::string& path, const std::string& name,
                                       const json& value, uint64_t data_begin, uint64_t data_size) {
  const std::string where = absl::StrCat("tensor ", Quoted(name));
  if (!value.is_object()) {
    return Invalid(
        path, absl::StrCat(where, ": expected an object with dtype, shape and data_offsets, got ",
                           DescribeJsonValue(value)));
  }
  TensorEntry entry;
  entry.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end()) return Invalid(path, absl::StrCat(where, ": missing field 'dtype'"));
  if (!dtype->is_string()) {
    return Invalid(path, absl::StrCat(where, ": field 'dtype' must be a string, got ",
                                      DescribeJsonValue(*dtype)));
  }
  entry.dtype_name = dtype->get<std::string>();
  const size_t element_size = SafetensorsDTypeSize(entry.dtype_name);
  if (element_size == 0) {
    return Invalid(
        path, absl::StrCat(
                  where, ": unknown dtype ", Quoted(entry.dtype_name),
                  " (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2)"));
  }

  auto shape = value.find("shape");
  if (shape == value.end()) return Invalid(path, absl::StrCat(where, ": missing field 'shape'"));
  if (!shape->is_array()) {
    return Invalid(path, absl::StrCat(where, ": field 'shape' must be an array, got ",
                                      DescribeJsonValue(*shape)));
  }
  // The byte count is accumulated in u64 with overflow checks: a corrupt shape such as
  // [2^40, 2^40] must be an error, not a wrapped-around small number that happens to match.
  uint64_t expected_bytes = element_size;
  bool overflow = false;
  for (size_t i = 0; i < shape->size(); ++i) {
    const json& dim = (*shape)[i];
    int64_t d;
    if (!JsonToInt64(dim, &d) || d < 0) {
      return Invalid(path,
                     absl::StrCat(where, ": shape[", i, "] must be a non-negative integer, got ",
                                  DescribeJsonValue(dim)));
    }
    entry.shape.push_back(d);
    uint64_t product;
    if (__builtin_mul_overflow(expected_bytes, static_cast<uint64_t>(d), &product)) {
      overflow = true;
    } else {
      expected_bytes = product;
    }
  }
  // A zero dimension makes the tensor empty whatever the other dims are, as in safetensors.
  if (std::find(entry.shape.begin(), entry.shape.end(), 0) != entry.shape.end()) {
    overflow = false;
    expected_bytes = 0;
  }
  if (overflow) {
    return Invalid(path, absl::StrCat(where, ": shape ", ShapeToString(entry.shape), " of dtype ",
                                      entry.dtype_name, " overflows a 64-bit byte count"));
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end()) {
    return Invalid(path, absl::StrCat(where, ": missing field 'data_offsets'"));
  }
  uint64_t begin = 0, end = 0;
  if (!offsets->is_array() || offsets->size() != 2 || !JsonToUint64((*offsets)[0], &begin) ||
      !JsonToUint64((*offsets)[1], &end)) {
    return Invalid(path, absl::StrCat(where,
                                      ": field 'data_offsets' must be an array of two non-negative "
                                      "integers [begin, end), got ",
                                      SanitizeForMessage(offsets->dump(
                                          -1, ' ', false, json::error_handler_t::replace))));
  }
  const std::string range = absl::StrCat("data_offsets [", begin, ", ", end, ")");
  if (end < begin) {
    return Invalid(path, absl::StrCat(where, ": ", range, " end before begin"));
  }
  if (end - begin != expected_bytes) {
    return Invalid(path, absl::StrCat(where, ": ", range, " do not match dtype ", entry.dtype_name,
                                      " and shape ", ShapeToString(entry.shape), " (expected ",
                                      expected_bytes, " bytes, got ", end - begin, ")"));
  }
  if (end > data_size) {
    return Invalid(path,
                   absl::StrCat(where, ": ", range,
                                " extend past the end of the file (the data section has only ",
                                data_size, " bytes; is the file truncated?)"));
  }
  entry.begin = data_begin + begin;
  entry.end = data_begin + end;
  return entry;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<MappedFile> mapping = MappedFile::Open(path);
  if (!mapping.ok()) return mapping.status();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(std::move(*mapping)));
  absl::Status status = file->ParseAndValidate();
  if (!status.ok()) return status;
  return file;
}

absl::Status SafetensorsFile::ParseAndValidate() {
  const std::string& path = mapping_.path();
  const uint64_t size = mapping_.size();
  if (size < 8) {
    return Invalid(path, absl::StrCat("file is ", size,
                                      " bytes, shorter than the 8-byte header length prefix "
                                      "(truncated or not a safetensors file)"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | mapping_.data()[i];  // LE u64
  if (header_len > kMaxHeaderBytes) {
    return Invalid(
        path, absl::StrCat("header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes,
                           " bytes (corrupt or not a safetensors file)"));
  }
  if (header_len > size - 8) {
    return Invalid(path,
                   absl::StrCat("header length ", header_len, " extends past the end of the file (",
                                size, " bytes; is the file truncated?)"));
  }
  data_begin_ = 8 + header_len;
  const uint64_t data_size = size - data_begin_;
  absl::string_view header(reinterpret_cast<const char*>(mapping_.data()) + 8, header_len);

  const size_t bad_utf8 = FindInvalidUtf8(header);
  if (bad_utf8 != absl::string_view::npos) {
    return Invalid(
        path, absl::StrCat("header is not valid UTF-8 (invalid byte 0x",
                           absl::Hex(static_cast<unsigned>(static_cast<uint8_t>(header[bad_utf8])),
                                     absl::kZeroPad2),
                           " at header offset ", bad_utf8, ")"));
  }
  absl::StatusOr<json> parsed = ParseJsonStrict(header, absl::StrCat(path, ": header"));
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  if (!root.is_object()) {
    return Invalid(path,
                   absl::StrCat("header must be a JSON object, got ", DescribeJsonValue(root)));
  }

  entries_.reserve(root.size());
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) {
        return Invalid(path, absl::StrCat("'__metadata__' must be an object of strings, got ",
                                          DescribeJsonValue(*it)));
      }
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Invalid(path, absl::StrCat("'__metadata__' key ", Quoted(m.key()),
                                            " must map to a string, got ", DescribeJsonValue(*m)));
        }
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    absl::StatusOr<TensorEntry> entry = ParseEntry(path, it.key(), *it, data_begin_, data_size);
    if (!entry.ok()) return entry.status();
    entries_.push_back(std::move(*entry));
  }

  std::sort(entries_.begin(), entries_.end(), [](const TensorEntry& a, const TensorEntry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  // Tensors must tile the data section: anything else means a corrupt writer or a file spliced
  // together from different versions, and hidden bytes could smuggle data past our checks.
  uint64_t cursor = data_begin_;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : entries_) {
    const uint64_t rel_begin = e.begin - data_begin_, rel_end = e.end - data_begin_;
    if (e.begin < cursor) {
      return Invalid(path, absl::StrCat("tensor ", Quoted(e.name), " data_offsets [", rel_begin,
                                        ", ", rel_end, ") overlap tensor ", Quoted(previous->name),
                                        " (which ends at ", cursor - data_begin_, ")"));
    }
    if (e.begin > cursor) {
      return Invalid(
          path,
          absl::StrCat("hole in the data section: bytes [", cursor - data_begin_, ", ", rel_begin,
                       ") before tensor ", Quoted(e.name),
                       previous == nullptr ? std::string(" (the first tensor must start at 0)")
                                           : absl::StrCat(" after tensor ", Quoted(previous->name)),
                       " belong to no tensor"));
    }
    cursor = e.end;
    previous = &e;
  }
  if (cursor != size) {
    return Invalid(
        path, absl::StrCat(
                  size - cursor, " trailing bytes after ",
                  previous == nullptr ? std::string("the header (no tensors)")
                                      : absl::StrCat("the last tensor ", Quoted(previous->name)),
                  ": the data section (", data_size, " bytes) must be exactly covered by tensors"));
  }

  for (const TensorEntry& e : entries_) {
    // Counted here so that a loader can warn once per file, before it copies anything.
    const std::optional<DType> dtype = ViewableDType(e.dtype_name);
    if (dtype.has_value() && e.bytes() > 0 && e.begin % DTypeSize(*dtype) != 0) {
      ++misaligned_tensors_;
    }
  }

  index_.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    // ParseJsonStrict already rejects duplicated keys; this is a second line of defence.
    if (!index_.emplace(entries_[i].name, i).second) {
      return Invalid(path, absl::StrCat("duplicate tensor name ", Quoted(entries_[i].name)));
    }
  }
  return absl::OkStatus();
}

const TensorEntry* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<Tensor> SafetensorsFile::View(const TensorEntry& entry,
                                             Misaligned misaligned) const {
  const std::string& path = mapping_.path();
  if (entries_.empty() || &entry < entries_.data() || &entry >= entries_.data() + entries_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", Quoted(entry.name),
                                                   ": entry does not belong to this file"));
  }
  const std::optional<DType> dtype = ViewableDType(entry.dtype_name);
  if (!dtype.has_value()) {
    return absl::UnimplementedError(absl::StrCat(path, ": tensor ", Quoted(entry.name), ": dtype ",
                                                 entry.dtype_name,
                                                 " cannot be viewed as a Tensor (supported: F32, "
                                                 "F16, BF16, I32, I64); convert the checkpoint"));
  }
  if (entry.shape.size() > static_cast<size_t>(Tensor::kMaxRank)) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": tensor ", Quoted(entry.name), ": rank ", entry.shape.size(), " (shape ",
        ShapeToString(entry.shape), ") exceeds Tensor::kMaxRank ", Tensor::kMaxRank));
  }
  Tensor tensor;
  tensor.data = const_cast<uint8_t*>(mapping_.data()) + entry.begin;
  tensor.dtype = *dtype;
  tensor.device = DeviceKind::kHost;
  tensor.rank = static_cast<int>(entry.shape.size());
  for (int i = 0; i < tensor.rank; ++i) tensor.shape[i] = entry.shape[i];
  // The mapping starts on a page boundary, so an offset that is not a multiple of the element
  // size gives a misaligned pointer; kernels dereference float*/uint16_t* directly (undefined
  // behaviour on misaligned data, and a fault in vectorised/GPU copies). Such a view is only for
  // a caller that copies it bytewise (see Misaligned).
  if (misaligned == Misaligned::kRefuse && !IsAlignedView(tensor)) {
    const size_t element_size = DTypeSize(*dtype);
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": tensor ", Quoted(entry.name), ": data at file offset ", entry.begin,
        " is not aligned to its ", element_size, "-byte ", entry.dtype_name,
        " elements (a safetensors writer older than 0.3.0 did not pad the header); this reader "
        "needs aligned data: rewrite the checkpoint with a current safetensors (save_file)"));
  }
  return tensor;
}

}  // namespace blossom
