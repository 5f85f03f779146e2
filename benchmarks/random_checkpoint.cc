#include "benchmarks/random_checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/loader/file_util.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/status_macros.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

using nlohmann::json;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      return "F32";
  }
}

const char* TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    default:
      return "float32";
  }
}

// mkdir -p.
absl::Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("creating directory ", prefix));
    }
  }
  if (GetPathKind(path) != PathKind::kDirectory) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

// An fopen'ed file that reports write errors as Status and is closed on every path.
class OutputFile {
 public:
  static absl::StatusOr<std::unique_ptr<OutputFile>> Create(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return ErrnoToStatus(errno, absl::StrCat("creating ", path));
    return std::unique_ptr<OutputFile>(new OutputFile(path, f));
  }
  ~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  absl::Status Write(const void* data, size_t bytes) {
    if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) {
      return ErrnoToStatus(errno, absl::StrCat("writing ", path_));
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) return ErrnoToStatus(errno, absl::StrCat("closing ", path_));
    return absl::OkStatus();
  }

 private:
  OutputFile(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  FILE* file_;
};

absl::Status CopyFile(const std::string& from, const std::string& to) {
  BLOSSOM_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(from));
  return WriteStringToFile(to, contents);
}

// Streams one tensor's values into `file`, chunk by chunk.
absl::Status WriteTensorData(const TensorSpec& spec, const RandomCheckpointOptions& options,
                             ThreadPool* pool, OutputFile* file) {
  constexpr int64_t kChunk = 1 << 22;  // elements; 16 MB of fp32 scratch
  const int64_t total = spec.NumElements();
  const size_t elem = DTypeSize(options.dtype);
  std::vector<float> values(std::min(total, kChunk));
  std::vector<char> bytes(values.size() * elem);
  const uint64_t key = TensorKey(options.seed, spec.name);
  for (int64_t begin = 0; begin < total; begin += kChunk) {
    const int64_t n = std::min(kChunk, total - begin);
    switch (spec.init) {
      case TensorSpec::Init::kOnes:
        std::fill(values.begin(), values.begin() + n, 1.0f);
        break;
      case TensorSpec::Init::kZeros:
        std::fill(values.begin(), values.begin() + n, 0.0f);
        break;
      case TensorSpec::Init::kNormal:
        // Sub-ranges are independent (counter-based stream), so the split cannot change values.
        pool->ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
          FillNormal(key, begin + b, e - b, static_cast<float>(options.init_std),
                     values.data() + b);
        });
        break;
    }
    ConvertFromF32(values.data(), bytes.data(), options.dtype, static_cast<size_t>(n));
    BLOSSOM_RETURN_IF_ERROR(file->Write(bytes.data(), static_cast<size_t>(n) * elem));
  }
  return absl::OkStatus();
}

absl::Status RefuseExistingWeights(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, absl::StrCat("listing ", dir));
  std::string found;
  while (struct dirent* entry = ::readdir(d)) {
    const absl::string_view name = entry->d_name;
    if (absl::EndsWith(name, ".safetensors") || name == "model.safetensors.index.json") {
      found = std::string(name);
      break;
    }
  }
  ::closedir(d);
  if (!found.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " already holds ", found, "; write into an empty or new directory"));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t TensorKey(uint64_t seed, const std::string& name) {
  // FNV-1a: stable across compilers and standard libraries, unlike std::hash.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return SplitMix64(h ^ SplitMix64(seed));
}

void FillNormal(uint64_t key, int64_t begin, int64_t n, float std, float* out) {
  constexpr double kTwoPi = 6.283185307179586;
  constexpr double kScale = 1.0 / 16777216.0;  // 2^-24
  int64_t i = begin;
  const int64_t end = begin + n;
  while (i < end) {
    const uint64_t pair = static_cast<uint64_t>(i) / 2;
    const uint64_t bits = SplitMix64(key + pair * 0xd1b54a32d192ed03ull);
    // u1 in (0, 1] so the log is finite; 24-bit uniforms are plenty for random weights.
    const double u1 = static_cast<double>((bits >> 40) + 1) * kScale;
    const double u2 = static_cast<double>(bits & 0xffffffull) * kScale;
    const double r = std::sqrt(-2.0 * std::log(u1)) * std;
    if (i % 2 == 0) {
      out[i - begin] = static_cast<float>(r * std::cos(kTwoPi * u2));
      ++i;
      if (i == end) break;
    }
    out[i - begin] = static_cast<float>(r * std::sin(kTwoPi * u2));
    ++i;
  }
}

std::string BloomConfigJson(const BloomShape& shape, DType dtype, double init_std) {
  // The fields and spellings of a config.json written by transformers 4.x save_pretrained for
  // BloomForCausalLM (compare tests/fixtures/models/*/config.json); keys sorted, indent 2.
  json config = {
      {"apply_residual_connection_post_layernorm", false},
      {"architectures", {"BloomForCausalLM"}},
      {"attention_dropout", 0.0},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"hidden_dropout", 0.0},
      {"hidden_size", shape.hidden},
      {"initializer_range", init_std},
      {"layer_norm_epsilon", 1e-05},
      {"model_type", "bloom"},
      {"n_head", shape.heads},
      {"n_layer", shape.layers},
      {"pad_token_id", 3},
      {"pretraining_tp", 1},
      {"slow_but_exact", false},
      {"torch_dtype", TorchDTypeName(dtype)},
      {"transformers_version", "4.45.2"},
      {"unk_token_id", 0},
      {"use_cache", true},
      {"vocab_size", shape.vocab},
  };
  return config.dump(2) + "\n";
}

std::vector<std::vector<size_t>> PlanShards(const std::vector<TensorSpec>& specs, DType dtype,
                                            uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t current = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(specs[i].NumElements()) * DTypeSize(dtype);
    if (!shards.back().empty() && current + bytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += bytes;
  }
  return shards;
}

absl::StatusOr<RandomCheckpointInfo> WriteRandomCheckpoint(const std::string& out_dir,
                                                           const RandomCheckpointOptions& options) {
  BLOSSOM_RETURN_IF_ERROR(ValidateBloomShape(options.shape));
  if (!IsFloat(options.dtype)) {
    return absl::InvalidArgumentError("the weight dtype must be f32, f16 or bf16");
  }
  if (!(options.init_std > 0.0)) return absl::InvalidArgumentError("init_std must be positive");
  if (options.max_shard_bytes == 0) {
    return absl::InvalidArgumentError("max_shard_bytes must be positive");
  }
  const std::string tokenizer_json = JoinPath(options.tokenizer_dir, "tokenizer.json");
  if (GetPathKind(tokenizer_json) != PathKind::kRegularFile) {
    return absl::NotFoundError(absl::StrCat("no tokenizer.json in '", options.tokenizer_dir, "'"));
  }
  BLOSSOM_RETURN_IF_ERROR(MakeDirs(out_dir));
  BLOSSOM_RETURN_IF_ERROR(RefuseExistingWeights(out_dir));

  const std::vector<TensorSpec> specs = BloomTensorSpecs(options.shape);
  const std::vector<std::vector<size_t>> shards =
      PlanShards(specs, options.dtype, options.max_shard_bytes);
  const size_t elem = DTypeSize(options.dtype);
  RandomCheckpointInfo info;
  info.param_count = options.shape.ParamCount();
  info.total_bytes = static_cast<uint64_t>(info.param_count) * elem;

  ThreadPool pool(options.threads);
  json weight_map = json::object();
  uint64_t written = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file_name =
        shards.size() == 1
            ? std::string("model.safetensors")
            : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards.size());
    // The header is known before any data: offsets follow the tensor order.
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (size_t i : shards[s]) {
      const uint64_t bytes = static_cast<uint64_t>(specs[i].NumElements()) * elem;
      header[specs[i].name] = {{"dtype", SafetensorsDTypeName(options.dtype)},
                               {"shape", specs[i].shape},
                               {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
      weight_map[specs[i].name] = file_name;
    }
    std::string header_text = header.dump();
    // Pad with spaces so the data section starts 8-byte aligned, as the safetensors writer does.
    header_text.append((8 - header_text.size() % 8) % 8, ' ');
    const uint64_t header_size = header_text.size();
    unsigned char size_bytes[8];
    for (int b = 0; b < 8; ++b) size_bytes[b] = static_cast<unsigned char>(header_size >> (8 * b));

    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> file,
                             OutputFile::Create(JoinPath(out_dir, file_name)));
    BLOSSOM_RETURN_IF_ERROR(file->Write(size_bytes, sizeof(size_bytes)));
    BLOSSOM_RETURN_IF_ERROR(file->Write(header_text.data(), header_text.size()));
    for (size_t i : shards[s]) {
      BLOSSOM_RETURN_IF_ERROR(WriteTensorData(specs[i], options, &pool, file.get()));
      written += static_cast<uint64_t>(specs[i].NumElements()) * elem;
      if (options.progress) options.progress(written, info.total_bytes);
    }
    BLOSSOM_RETURN_IF_ERROR(file->Close());
    info.weight_files.push_back(file_name);
  }
  if (shards.size() > 1) {
    json index = {{"metadata", {{"total_size", info.total_bytes}}}, {"weight_map", weight_map}};
    BLOSSOM_RETURN_IF_ERROR(
        WriteStringToFile(JoinPath(out_dir, "model.safetensors.index.json"), index.dump(2) + "\n"));
  }
  BLOSSOM_RETURN_IF_ERROR(
      WriteStringToFile(JoinPath(out_dir, "config.json"),
                        BloomConfigJson(options.shape, options.dtype, options.init_std)));
  BLOSSOM_RETURN_IF_ERROR(CopyFile(tokenizer_json, JoinPath(out_dir, "tokenizer.json")));
  for (const char* optional : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string from = JoinPath(options.tokenizer_dir, optional);
    if (GetPathKind(from) == PathKind::kRegularFile) {
      BLOSSOM_RETURN_IF_ERROR(CopyFile(from, JoinPath(out_dir, optional)));
    }
  }
  return info;
}

}  // namespace blossom
