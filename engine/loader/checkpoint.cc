#include "engine/loader/checkpoint.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/loader/file_util.h"
#include "engine/loader/json_util.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

using nlohmann::json;

absl::string_view Canonical(absl::string_view stored) {
  if (absl::StartsWith(stored, Checkpoint::kPrefix)) {
    stored.remove_prefix(sizeof(Checkpoint::kPrefix) - 1);
  }
  return stored;
}

std::string Quoted(absl::string_view name) {
  return absl::StrCat("'", SanitizeForMessage(name), "'");
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// A shard must be a file directly inside the model directory: the index is untrusted and must
// not make us open "../../etc/passwd" or an absolute path.
bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(absl::string_view("/\\\0", 3)) == absl::string_view::npos;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir) {
  switch (GetPathKind(model_dir)) {
    case PathKind::kDirectory:
      break;
    case PathKind::kMissing:
      return absl::NotFoundError(absl::StrCat("model directory '", model_dir, "' does not exist"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("model directory '", model_dir, "' is not a directory"));
  }
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->model_dir_ = model_dir;
  absl::StatusOr<BloomConfig> config = LoadBloomConfig(model_dir);
  if (!config.ok()) return config.status();
  checkpoint->config_ = *config;

  const std::string single = JoinPath(model_dir, kSingleFile);
  const std::string index = JoinPath(model_dir, kIndexFile);
  const bool has_single = GetPathKind(single) != PathKind::kMissing;
  const bool has_index = GetPathKind(index) != PathKind::kMissing;
  absl::Status status;
  if (has_single) {
    if (has_index) {
      checkpoint->Warn(absl::StrCat(model_dir, ": both ", kSingleFile, " and ", kIndexFile,
                                    " exist; using ", kSingleFile, " (as Hugging Face does)"));
    }
    status = checkpoint->OpenSingle(single);
  } else if (has_index) {
    checkpoint->sharded_ = true;
    status = checkpoint->OpenSharded(index);
  } else {
    std::string hint;
    if (GetPathKind(JoinPath(model_dir, "pytorch_model.bin")) != PathKind::kMissing ||
        GetPathKind(JoinPath(model_dir, "pytorch_model.bin.index.json")) != PathKind::kMissing) {
      hint = "; found PyTorch .bin weights, which are not supported: convert them to safetensors";
    }
    return absl::NotFoundError(absl::StrCat("model directory '", model_dir, "' has no weights: ",
                                            "looked for ", kSingleFile, " and ", kIndexFile, hint));
  }
  if (!status.ok()) return status;
  if (checkpoint->tensors_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model directory '", model_dir, "': the checkpoint contains no tensors"));
  }
  return checkpoint;
}

absl::Status Checkpoint::OpenFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  const SafetensorsFile& f = **file;
  if (f.misaligned_tensors() > 0) {
    // Once per file, before anything is copied: the file loads, but not in place.
    Warn(absl::StrCat(
        f.path(), ": ", f.misaligned_tensors(), " of its ", f.entries().size(),
        " tensors are not aligned to their element size (data starts at byte ", f.data_begin(),
        ": a safetensors writer older than 0.3.0 did not pad the header); loading copies them "
        "into aligned memory (slower, and the cpu backend keeps the copies); re-save the file "
        "with a current safetensors to load it in place"));
  }
  files_.push_back(std::move(*file));
  return absl::OkStatus();
}

absl::Status Checkpoint::OpenSingle(const std::string& path) {
  absl::Status opened = OpenFile(path);
  if (!opened.ok()) return opened;
  const SafetensorsFile* f = files_.back().get();
  for (const TensorEntry& entry : f->entries()) {
    absl::Status status = AddTensor(f, &entry);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::OpenSharded(const std::string& index_path) {
  absl::StatusOr<std::string> text = ReadFileToString(index_path);
  if (!text.ok()) return text.status();
  absl::StatusOr<json> parsed = ParseJsonStrict(*text, index_path);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        index_path, ": expected a JSON object at the top level, got ", DescribeJsonValue(root)));
  }
  auto weight_map = root.find("weight_map");
  if (weight_map == root.end()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": missing field 'weight_map'"));
  }
  if (!weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": field 'weight_map' must be an object {tensor: file}, got ",
                     DescribeJsonValue(*weight_map)));
  }
  if (weight_map->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": 'weight_map' is empty"));
  }

  // Validate every shard name before opening anything, then open each listed shard once, in
  // name order (which is file order for the usual model-0000i-of-0000n names: Prefetch then
  // reads the checkpoint front to back).
  std::set<std::string> shard_names;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map entry for tensor ", Quoted(it.key()),
                       " must be a file name string, got ", DescribeJsonValue(*it)));
    }
    const std::string& shard = it->get_ref<const std::string&>();
    if (!IsPlainFileName(shard)) {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": weight_map maps tensor ", Quoted(it.key()), " to ", Quoted(shard),
          ", which is not a plain file name inside the model directory"));
    }
    shard_names.insert(shard);
  }
  absl::flat_hash_map<std::string, const SafetensorsFile*> shards;
  for (const std::string& shard : shard_names) {
    const std::string path = JoinPath(model_dir_, shard);
    if (GetPathKind(path) == PathKind::kMissing) {
      // Name a tensor too: it tells the user which part of the model is missing.
      std::string example;
      for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
        if (it->get_ref<const std::string&>() == shard) {
          example = it.key();
          break;
        }
      }
      return absl::NotFoundError(absl::StrCat(index_path, ": shard ", Quoted(shard),
                                              " (holding e.g. tensor ", Quoted(example),
                                              ") does not exist: ", path));
    }
    absl::Status opened = OpenFile(path);
    if (!opened.ok()) return opened;
    shards[shard] = files_.back().get();
  }

  uint64_t listed_bytes = 0;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    const std::string& shard = it->get_ref<const std::string&>();
    const SafetensorsFile* file = shards.find(shard)->second;  // all listed shards are open
    const TensorEntry* entry = file->Find(it.key());
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map says tensor ", Quoted(it.key()), " is in ",
                       Quoted(shard), ", but ", file->path(), " has no such tensor"));
    }
    absl::Status status = AddTensor(file, entry);
    if (!status.ok()) return status;
    listed_bytes += entry->bytes();
  }
  // Hugging Face loads every tensor of each listed shard, whatever the index says (older
  // conversions wrote indexes that miss tensors), so the index only chooses the shards. A tensor
  // the index lists in another shard, or stored under the other spelling elsewhere, is stored
  // twice: AddTensor refuses it rather than pick one.
  for (const auto& file : files_) {
    size_t unlisted = 0;
    std::string example;
    for (const TensorEntry& entry : file->entries()) {
      auto listed = weight_map->find(entry.name);
      if (listed != weight_map->end() && shards.find(listed->get_ref<const std::string&>())
                                                 ->second == file.get()) {
        continue;  // registered above
      }
      absl::Status status = AddTensor(file.get(), &entry);
      if (!status.ok()) return status;
      if (unlisted++ == 0) example = entry.name;
    }
    if (unlisted > 0) {
      Warn(absl::StrCat(file->path(), ": ", unlisted, " tensor(s) not listed in ", kIndexFile,
                        " (e.g. ", Quoted(example), ") are loaded too, as Hugging Face does"));
    }
  }

  // total_size is informational (HF writes the sum of tensor bytes); a mismatch suggests a
  // stale index but the per-tensor checks above are what guarantee correctness.
  auto metadata = root.find("metadata");
  if (metadata != root.end() && metadata->is_object()) {
    auto total = metadata->find("total_size");
    if (total != metadata->end()) {
      uint64_t declared;
      if (!JsonToUint64(*total, &declared)) {
        Warn(absl::StrCat(index_path, ": metadata.total_size is not a non-negative integer (",
                          DescribeJsonValue(*total), "); ignored"));
      } else if (declared != listed_bytes) {
        Warn(absl::StrCat(index_path, ": metadata.total_size is ", declared,
                          " but the listed tensors take ", listed_bytes, " bytes"));
      }
    }
  } else if (metadata != root.end() && !metadata->is_null()) {
    Warn(absl::StrCat(index_path, ": field 'metadata' is not an object (",
                      DescribeJsonValue(*metadata), "); ignored"));
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::AddTensor(const SafetensorsFile* file, const TensorEntry* entry) {
  const absl::string_view canonical = Canonical(entry->name);
  auto [it, inserted] = tensors_.emplace(std::string(canonical), Location{file, entry});
  if (!inserted) {
    const Location& other = it->second;
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir_, ": tensor ", Quoted(canonical), " is stored twice: as ",
                     Quoted(other.entry->name), " in ", other.file->path(), " and as ",
                     Quoted(entry->name), " in ", file->path()));
  }
  total_bytes_ += entry->bytes();
  return absl::OkStatus();
}

void Checkpoint::Warn(std::string message) {
  spdlog::warn("{}", message);
  warnings_.push_back(std::move(message));
}

bool Checkpoint::Has(absl::string_view canonical_name) const {
  return tensors_.contains(canonical_name);
}

const TensorEntry* Checkpoint::FindEntry(absl::string_view canonical_name) const {
  auto it = tensors_.find(canonical_name);
  return it == tensors_.end() ? nullptr : it->second.entry;
}

absl::StatusOr<Tensor> Checkpoint::Get(absl::string_view canonical_name,
                                       absl::Span<const int64_t> expected_shape,
                                       Misaligned misaligned) const {
  auto it = tensors_.find(canonical_name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", model_dir_, " has no tensor ", Quoted(canonical_name), " (looked for ",
        Quoted(canonical_name), " and ", Quoted(absl::StrCat(kPrefix, canonical_name)), ")"));
  }
  const Location& loc = it->second;
  const std::vector<int64_t>& actual = loc.entry->shape;
  if (!std::equal(actual.begin(), actual.end(), expected_shape.begin(), expected_shape.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat(loc.file->path(), ": tensor ", Quoted(canonical_name),
                     loc.entry->name != canonical_name
                         ? absl::StrCat(" (stored as ", Quoted(loc.entry->name), ")")
                         : std::string(),
                     " has shape ", ShapeToString(actual), ", expected ",
                     ShapeString(expected_shape), " (config: hidden_size ", config_.hidden_size,
                     ", n_head ", config_.n_head, ", vocab_size ", config_.vocab_size, ")"));
  }
  return loc.file->View(*loc.entry, misaligned);
}

std::vector<std::string> Checkpoint::CanonicalNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, loc] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string Checkpoint::DescribeLocation(absl::string_view canonical_name) const {
  auto it = tensors_.find(canonical_name);
  if (it == tensors_.end()) {
    return absl::StrCat("<no tensor ", Quoted(canonical_name), " in ", model_dir_, ">");
  }
  const Location& loc = it->second;
  if (loc.entry->name == canonical_name) return loc.file->path();
  return absl::StrCat(loc.file->path(), " (as ", Quoted(loc.entry->name), ")");
}

absl::Status Checkpoint::Prefetch(const ProgressCallback& progress, uint64_t chunk_bytes) const {
  if (chunk_bytes == 0) {
    return absl::InvalidArgumentError("Checkpoint::Prefetch: chunk_bytes must be positive");
  }
  uint64_t total = 0;
  for (const auto& file : files_) total += file->file_size() - file->data_begin();
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t done = 0;
  if (progress) progress(0, total);
  for (const auto& file : files_) {
    const MappedFile& mapping = file->mapping();
    const uint64_t begin = file->data_begin(), end = file->file_size();
    auto advise = [&](uint64_t offset) {
      if (offset >= end) return;
      absl::Status status =
          mapping.Advise(offset, std::min(chunk_bytes, end - offset), MADV_WILLNEED);
      // Only a hint: a kernel that refuses still gets the pages through the touches below.
      if (!status.ok()) spdlog::debug("prefetch: {}", status.ToString());
    };
    advise(begin);
    for (uint64_t offset = begin; offset < end; offset += chunk_bytes) {
      const uint64_t chunk_end = std::min(end, offset + chunk_bytes);
      advise(chunk_end);  // start readahead of the next chunk while this one faults in
      // One read per page faults it in; the volatile sink keeps the reads from being elided.
      uint8_t sink = 0;
      const volatile uint8_t* data = mapping.data();
      for (uint64_t p = offset; p < chunk_end; p = (p / page + 1) * page) sink ^= data[p];
      static std::atomic<uint8_t> g_sink;
      g_sink.store(sink, std::memory_order_relaxed);
      done += chunk_end - offset;
      if (progress) progress(done, total);
    }
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::ReleasePages(const Tensor& view) const {
  const uint8_t* begin = static_cast<const uint8_t*>(view.data);
  const uint64_t bytes = view.bytes();
  for (const auto& file : files_) {
    const MappedFile& mapping = file->mapping();
    const uint8_t* base = mapping.data();
    if (begin < base || begin > base + mapping.size() ||
        bytes > static_cast<uint64_t>(base + mapping.size() - begin))
      continue;
    // Inward to whole pages: a page shared with a neighbouring tensor stays.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t offset = static_cast<uint64_t>(begin - base);
    const uint64_t first = (offset + page - 1) / page * page, last = (offset + bytes) / page * page;
    if (last <= first) return absl::OkStatus();
    if (::madvise(const_cast<uint8_t*>(base) + first, last - first, MADV_DONTNEED) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("madvise(MADV_DONTNEED) on ", mapping.path()));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("Checkpoint::ReleasePages: ", bytes,
                                                 " bytes that are not inside a mapping of ",
                                                 model_dir_));
}

}  // namespace blossom
