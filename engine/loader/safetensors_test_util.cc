#include "engine/loader/safetensors_test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/loader/file_util.h"
#include "kernels/dtype.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace test_util {
namespace {

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(&out[0], values.data(), out.size());  // host is little-endian
  return out;
}

}  // namespace

std::string SafetensorsHeaderJson(const std::vector<TestTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const TestTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  return header.dump();
}

std::string BuildRawSafetensors(absl::string_view header_json, absl::string_view data) {
  std::string out(8, '\0');
  uint64_t n = header_json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  absl::StrAppend(&out, header_json, data);
  return out;
}

std::string BuildSafetensors(const std::vector<TestTensor>& tensors,
                             const SafetensorsWriteOptions& options) {
  std::string header = SafetensorsHeaderJson(tensors, options.metadata);
  if (options.edit_header) options.edit_header(&header);
  if (options.align > 1) {
    while ((8 + header.size()) % options.align != 0) header.push_back(' ');
  }
  std::string data;
  for (const TestTensor& t : tensors) data += t.bytes;
  std::string file = BuildRawSafetensors(header, data);
  if (options.edit_file) options.edit_file(&file);
  return file;
}

std::string F32Bytes(const std::vector<float>& values) { return RawBytes(values); }

std::string F16Bytes(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(FloatToHalf(v));
  return RawBytes(bits);
}

std::string BF16Bytes(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(FloatToBF16(v));
  return RawBytes(bits);
}

std::string I32Bytes(const std::vector<int32_t>& values) { return RawBytes(values); }
std::string I64Bytes(const std::vector<int64_t>& values) { return RawBytes(values); }

std::string FreshTestDir(absl::string_view name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = JoinPath(root != nullptr ? root : "/tmp", name);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  std::filesystem::create_directories(dir, ignored);
  return dir;
}

absl::Status WriteTestFile(const std::string& path, absl::string_view contents) {
  return WriteStringToFile(path, contents);
}

std::string TinyBloomConfigJson(int64_t vocab_size, int64_t hidden_size, int64_t n_layer,
                                int64_t n_head) {
  nlohmann::json config = {{"model_type", "bloom"},      {"vocab_size", vocab_size},
                           {"hidden_size", hidden_size}, {"n_layer", n_layer},
                           {"n_head", n_head},           {"layer_norm_epsilon", 1e-5},
                           {"bos_token_id", 1},          {"eos_token_id", 2},
                           {"pad_token_id", 3},          {"torch_dtype", "float16"}};
  return config.dump(2);
}

}  // namespace test_util
}  // namespace blossom
