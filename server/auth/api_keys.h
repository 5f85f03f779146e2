// API keys: "Authorization: Bearer <key>" checked against a key list. The one implementation
// used by both the gRPC server (metadata) and the HTTP gateway (header), so the two accept
// exactly the same credentials.
#ifndef BLOSSOM_SERVER_AUTH_API_KEYS_H_
#define BLOSSOM_SERVER_AUTH_API_KEYS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace blossom::auth {

// The token of a Bearer credential (RFC 9110 11.4, RFC 6750 2.1): the scheme is matched
// case-insensitively ("bearer", "BEARER"), and spaces or tabs around the value and between
// scheme and token are tolerated. nullopt for any other scheme, a missing token, or a token
// with inner whitespace.
absl::optional<absl::string_view> BearerToken(absl::string_view authorization);

// Equality whose time depends only on the longer input's length, never on where the inputs
// differ (the length difference is folded into the result, not returned early).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Keys shorter than this are accepted but reported (ApiKeys::short_key_lines): a guessable
// key is a deployment's choice to fix, not a reason to refuse starting.
inline constexpr size_t kMinStrongKeyLength = 16;

// Immutable after construction; safe to share between threads.
class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  // One key per line; surrounding whitespace, blank lines and lines starting with '#' are
  // skipped. A file without keys is an error (it would silently disable auth), and so is a
  // line no client could ever present (BearerToken would never yield it, so the server would
  // lock everyone out without a word): inner spaces or tabs (e.g. "Bearer sk-abc", two keys on
  // one line), or a control or non-ASCII byte. Such errors name the line, never the key.
  static absl::StatusOr<ApiKeys> LoadFile(const std::string& path);

  // False when no keys are configured (every request is allowed).
  bool enabled() const { return !keys_.empty(); }
  // Whether the Authorization value (nullptr = absent) is a Bearer credential carrying a
  // configured key. Every configured key is compared in constant time, so timing reveals
  // neither which key matched nor a matching prefix. Always true when no keys are configured.
  bool Allows(const std::string* authorization) const;
  bool Allows(absl::string_view authorization) const;

  // LoadFile: the 1-based line numbers of keys shorter than kMinStrongKeyLength, in file
  // order, for the caller to warn about (empty for the vector constructor).
  const std::vector<int>& short_key_lines() const { return short_key_lines_; }

 private:
  std::vector<std::string> keys_;
  std::vector<int> short_key_lines_;
};

}  // namespace blossom::auth

#endif  // BLOSSOM_SERVER_AUTH_API_KEYS_H_
