// API-key checking for the gateway: "Authorization: Bearer <key>" against a key list.
#ifndef BLOSSOM_CLIENTS_GATEWAY_AUTH_H_
#define BLOSSOM_CLIENTS_GATEWAY_AUTH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom::gateway {

// Immutable after construction; safe to share between threads.
class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  // One key per line; surrounding whitespace, blank lines and lines starting with '#' are
  // skipped. An existing file without keys is an error (it would silently disable auth).
  static absl::StatusOr<ApiKeys> LoadFile(const std::string& path);

  // False when no keys are configured (every request is allowed).
  bool enabled() const { return !keys_.empty(); }
  // Whether the Authorization header value (nullptr = absent) is "Bearer <a configured key>".
  // The scheme is case-insensitive; the key is compared in constant time against every
  // configured key, so timing reveals neither which key matched nor a matching prefix.
  bool Allows(const std::string* authorization) const;

 private:
  std::vector<std::string> keys_;
};

// Constant-time equality for equal lengths (length differences return early).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_AUTH_H_
