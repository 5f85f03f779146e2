#include "server/auth/api_keys.h"

#include <algorithm>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace blossom::auth {
namespace {

bool IsSpaceOrTab(char c) { return c == ' ' || c == '\t'; }

absl::string_view TrimSpaceAndTab(absl::string_view s) {
  while (!s.empty() && IsSpaceOrTab(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpaceOrTab(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

absl::optional<absl::string_view> BearerToken(absl::string_view authorization) {
  absl::string_view value = TrimSpaceAndTab(authorization);
  constexpr absl::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme) ||
      !IsSpaceOrTab(value[kScheme.size()])) {
    return absl::nullopt;
  }
  absl::string_view token = TrimSpaceAndTab(value.substr(kScheme.size()));
  if (token.empty() || std::any_of(token.begin(), token.end(), IsSpaceOrTab)) return absl::nullopt;
  return token;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  // volatile: keeps the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
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
  return authorization != nullptr && Allows(absl::string_view(*authorization));
}

bool ApiKeys::Allows(absl::string_view authorization) const {
  if (keys_.empty()) return true;
  absl::optional<absl::string_view> presented = BearerToken(authorization);
  if (!presented) return false;
  bool match = false;
  for (const std::string& key : keys_) {
    // No early exit: every key is compared.
    match = ConstantTimeEquals(*presented, key) | match;
  }
  return match;
}

}  // namespace blossom::auth
