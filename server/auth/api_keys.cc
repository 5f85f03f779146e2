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

// Why no Authorization header could carry `key` (trimmed, non-empty), or "" when one can.
// The reason never quotes the key: it ends up in logs.
std::string UnusableKeyReason(absl::string_view key) {
  if (BearerToken(key).has_value()) {
    return "holds 'Bearer <key>': write the key alone (clients add the scheme)";
  }
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (IsSpaceOrTab(key[i])) {
      return "has a space or tab inside the key (one key per line; a Bearer token has no "
             "whitespace)";
    }
    if (c < 0x21 || c > 0x7e) {
      return absl::StrCat("has a control or non-ASCII byte at column ", i + 1,
                          " (keys are printable ASCII; gRPC metadata and HTTP headers carry "
                          "nothing else intact)");
    }
  }
  return "";
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
  ApiKeys loaded;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || key[0] == '#') continue;
    if (std::string reason = UnusableKeyReason(key); !reason.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("API keys file ", path, " line ", number, ": ", reason));
    }
    if (key.size() < kMinStrongKeyLength) loaded.short_key_lines_.push_back(number);
    loaded.keys_.emplace_back(key);
  }
  if (loaded.keys_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no API keys in ", path));
  }
  return loaded;
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
