// A BLOOM model directory: config.json plus weights in safetensors, either one
// model.safetensors or shards listed by model.safetensors.index.json.
//
// Tensors are addressed by canonical names without the "transformer." prefix
// ("h.0.mlp.dense_h_to_4h.weight"); files may store either spelling. All tensors are views into
// read-only mappings: loading never holds a second copy of the weights, so a 352 GB BLOOM-176B
// checkpoint costs address space and page cache, not heap. The exception is a file whose
// tensors are misaligned for their dtype (written before safetensors 0.3.0, see safetensors.h):
// Get hands those out only to a caller that copies them (Misaligned::kAllow), and Open warns
// once per such file.
#ifndef BLOSSOM_ENGINE_LOADER_CHECKPOINT_H_
#define BLOSSOM_ENGINE_LOADER_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"
#include "kernels/tensor.h"

namespace blossom {

// Called with (bytes done, bytes total); total stays fixed during one call of Prefetch.
using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

// Opened checkpoint. Created only by Open; not copyable or movable (Tensors returned by Get point
// into mappings owned by this object and stay valid for its lifetime).
// Invariants: every canonical name maps to exactly one validated entry of one opened file; no
// canonical name is stored under both spellings.
// Thread-safety: immutable after Open; all const methods (Prefetch included) may be called
// concurrently.
class Checkpoint {
 public:
  static constexpr char kConfigFile[] = "config.json";
  static constexpr char kSingleFile[] = "model.safetensors";
  static constexpr char kIndexFile[] = "model.safetensors.index.json";
  static constexpr char kPrefix[] = "transformer.";

  // Loads config.json and opens the weights. Like Hugging Face, prefers model.safetensors when
  // both it and an index exist (with a warning). For a sharded checkpoint only the shards listed
  // in the index are opened, each shard name must be a plain file name inside model_dir, and
  // every tensor of the weight map must be in its shard. Like Hugging Face, every tensor of a
  // listed shard is loaded, also those the index does not list (a warning per shard); a tensor
  // stored in two shards is an error. An inconsistent metadata.total_size and files with
  // misaligned tensors are warnings too (see warnings()).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_dir);

  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& model_dir() const { return model_dir_; }
  const BloomConfig& config() const { return config_; }
  bool sharded() const { return sharded_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

  // True if the checkpoint has this tensor (e.g. "lm_head.weight" is normally absent: tied).
  bool Has(absl::string_view canonical_name) const;

  // The tensor as a read-only host view into the mapping. NotFound names the checkpoint and both
  // spellings looked for; a shape mismatch (InvalidArgument) names the tensor, its file, and the
  // expected and actual shapes. Dtype and alignment errors come from SafetensorsFile::View: with
  // Misaligned::kAllow a misaligned tensor is returned too, for reading bytewise only (see
  // IsAlignedView, CopyWeightBlock).
  absl::StatusOr<Tensor> Get(absl::string_view canonical_name,
                             absl::Span<const int64_t> expected_shape,
                             Misaligned misaligned = Misaligned::kRefuse) const;

  // The entry behind a canonical name, or nullptr.
  const TensorEntry* FindEntry(absl::string_view canonical_name) const;

  // Sorted canonical names.
  std::vector<std::string> CanonicalNames() const;

  // Sum of the byte sizes of all tensors the checkpoint exposes.
  uint64_t total_bytes() const { return total_bytes_; }

  // Path of the file holding the tensor (plus the stored name if it has the prefix), for error
  // messages; "<no tensor 'x' in DIR>" if absent.
  std::string DescribeLocation(absl::string_view canonical_name) const;

  // Reads every opened file's data section, shard by shard in chunks of `chunk_bytes`:
  // madvise(MADV_WILLNEED) starts readahead, then one byte per page is touched so that the pages
  // are resident when Prefetch returns. This makes load time measurable up front and keeps page
  // faults out of the first forward pass. `progress` (may be empty) is called after every chunk
  // with the bytes done and the total (the sum of the files' data sections).
  absl::Status Prefetch(const ProgressCallback& progress = nullptr,
                        uint64_t chunk_bytes = uint64_t{64} << 20) const;

  // Gives back the pages of this process's mapping that lie wholly inside `view` (a tensor Get
  // returned, or rows of one): madvise(MADV_DONTNEED). For a weight the backend copied at import
  // (repacked or quantized), whose mapped pages would otherwise stay resident next to the copy.
  // The file is untouched and the mapping stays valid: a later read pages the data back in, so a
  // release of pages still in use costs time, never data. InvalidArgument if `view` is not
  // inside one of this checkpoint's mappings.
  absl::Status ReleasePages(const Tensor& view) const;

  // Non-fatal problems found by Open (also logged with spdlog).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct Location {
    const SafetensorsFile* file;
    const TensorEntry* entry;
  };

  Checkpoint() = default;
  // Opens and validates one safetensors file into files_ (warning if its tensors are misaligned).
  absl::Status OpenFile(const std::string& path);
  absl::Status OpenSingle(const std::string& path);
  absl::Status OpenSharded(const std::string& index_path);
  // Registers `entry` under its canonical name; errors if the other spelling is already there.
  absl::Status AddTensor(const SafetensorsFile* file, const TensorEntry* entry);
  void Warn(std::string message);

  std::string model_dir_;
  BloomConfig config_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, Location> tensors_;  // canonical name -> location
  uint64_t total_bytes_ = 0;
  std::vector<std::string> warnings_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_CHECKPOINT_H_
