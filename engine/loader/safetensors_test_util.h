// Test helpers: build small safetensors files and model directories byte by byte, with hooks to
// corrupt them, so that every validation branch of the loader can be exercised.
#ifndef BLOSSOM_ENGINE_LOADER_SAFETENSORS_TEST_UTIL_H_
#define BLOSSOM_ENGINE_LOADER_SAFETENSORS_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blossom {
namespace test_util {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

struct SafetensorsWriteOptions {
  std::map<std::string, std::string> metadata;  // written as __metadata__ if non-empty
  // The header is padded with spaces so that the data section starts at a multiple of this (the
  // reference writer uses 8). 1 disables padding.
  size_t align = 8;
  // Corruption hooks. edit_header runs on the JSON text before the length prefix is computed;
  // edit_file runs on the finished bytes.
  std::function<void(std::string* header_json)> edit_header;
  std::function<void(std::string* file)> edit_file;
};

// The header JSON the writer would produce (offsets contiguous, in the given order; no padding).
std::string SafetensorsHeaderJson(const std::vector<TestTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// A complete file: u64 length, header (padded), data (tensors' bytes concatenated in order).
std::string BuildSafetensors(const std::vector<TestTensor>& tensors,
                             const SafetensorsWriteOptions& options = {});

// A file from an arbitrary header text and data section (length prefix = header.size()).
std::string BuildRawSafetensors(absl::string_view header_json, absl::string_view data);

// Little-endian encodings; F16/BF16 round to nearest-even from the given floats.
std::string F32Bytes(const std::vector<float>& values);
std::string F16Bytes(const std::vector<float>& values);
std::string BF16Bytes(const std::vector<float>& values);
std::string I32Bytes(const std::vector<int32_t>& values);
std::string I64Bytes(const std::vector<int64_t>& values);

// $TEST_TMPDIR/<name> (or /tmp/... outside Bazel), emptied and created fresh.
std::string FreshTestDir(absl::string_view name);

absl::Status WriteTestFile(const std::string& path, absl::string_view contents);

// A valid config.json for a tiny BLOOM.
std::string TinyBloomConfigJson(int64_t vocab_size, int64_t hidden_size, int64_t n_layer,
                                int64_t n_head);

}  // namespace test_util
}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_SAFETENSORS_TEST_UTIL_H_
