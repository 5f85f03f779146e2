// Credentials read from files named on the command line: PEM files for TLS, and API keys, which
// belong in a file because a flag's value shows in `ps` and /proc/<pid>/cmdline to every local
// user. Shared by blossom-gateway and the `blossom` CLI, so both refuse the same bad files.
#ifndef BLOSSOM_CLIENTS_GATEWAY_CREDENTIAL_FILES_H_
#define BLOSSOM_CLIENTS_GATEWAY_CREDENTIAL_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom::gateway {

// The contents of the PEM file `path` that `flag` names (a CA bundle, a certificate chain, a
// private key). InvalidArgument naming the flag when it cannot be read or is empty: gRPC would
// otherwise fall back to the system roots, or send no client certificate, without a word.
absl::StatusOr<std::string> ReadPemFile(absl::string_view flag, const std::string& path);

// OK when `key` can be sent as "authorization: Bearer <key>": non-empty printable ASCII without
// spaces (gRPC aborts the process on other metadata bytes, and a Bearer token has no
// whitespace). The message names `source` (a flag or variable) and never quotes the key.
absl::Status CheckApiKey(absl::string_view source, absl::string_view key);

// The API key in the file `path` that `flag` names: surrounding whitespace (the newline an
// editor or `echo` leaves) trimmed, then CheckApiKey. An unreadable or empty file is an error:
// sending no key would fail every call with a less helpful UNAUTHENTICATED.
absl::StatusOr<std::string> ReadApiKeyFile(absl::string_view flag, const std::string& path);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_CREDENTIAL_FILES_H_
