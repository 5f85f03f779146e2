#include "clients/gateway/credential_files.h"

#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace blossom::gateway {
namespace {

absl::StatusOr<std::string> ReadWholeFile(absl::string_view flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::string contents{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  return contents;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(flag, path);
  if (contents.ok() && absl::StripAsciiWhitespace(*contents).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  }
  return contents;
}

absl::Status CheckApiKey(absl::string_view source, absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": the key is empty"));
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": the key has a space, control or non-ASCII byte at position ", i + 1,
          " (a key is one line of printable ASCII without spaces)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadApiKeyFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(flag, path);
  if (!contents.ok()) return contents.status();
  const std::string key(absl::StripAsciiWhitespace(*contents));
  if (key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no key (it is empty)"));
  }
  if (absl::Status usable = CheckApiKey(absl::StrCat(flag, " ", path), key); !usable.ok()) {
    return usable;
  }
  return key;
}

}  // namespace blossom::gateway
