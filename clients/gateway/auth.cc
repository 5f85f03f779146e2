#include "clients/gateway/auth.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace blossom::gateway {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

absl::StatusOr<ApiKeys> ApiKeys::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read API keys file ", path));
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || key[0] == '#') continue;
    keys.emplace_back(key);
  }
  if (keys.empty()) return absl::InvalidArgumentError(absl::StrCat("no API keys in ", path));
  return ApiKeys(std::move(keys));
}

bool ApiKeys::Allows(const std::string* authorization) const {
  if (keys_.empty()) return true;
  if (authorization == nullptr) return false;
  absl::string_view value = *authorization;
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) return false;
  absl::string_view presented = absl::StripAsciiWhitespace(value.substr(7));
  bool match = false;
  for (const std::string& key : keys_) {
    // No early exit: every key is compared.
    match = ConstantTimeEquals(presented, key) | match;
  }
  return match;
}

}  // namespace blossom::gateway
