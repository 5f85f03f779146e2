// Small filesystem helpers for the loader: every failure is an absl::Status whose message names
// the path and the errno text, so that "model won't load" reports say which file and why.
#ifndef BLOSSOM_ENGINE_LOADER_FILE_UTIL_H_
#define BLOSSOM_ENGINE_LOADER_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom {

// "dir/name", without doubling a trailing slash of `dir`.
std::string JoinPath(absl::string_view dir, absl::string_view name);

// Last path component ("a/b/c.json" -> "c.json").
std::string BaseName(absl::string_view path);

enum class PathKind { kMissing, kRegularFile, kDirectory, kOther };

// Follows symlinks (checkpoints are often symlinks into a Hugging Face cache).
PathKind GetPathKind(const std::string& path);

// Reads a whole (small) file, e.g. config.json. NotFound if absent; other errors carry errno text.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes (creates or truncates) a file. Used by tests and tools.
absl::Status WriteStringToFile(const std::string& path, absl::string_view contents);

// Maps errno to a status code (ENOENT -> NotFound, EACCES -> PermissionDenied, ...) with a message
// "<what>: <strerror>".
absl::Status ErrnoToStatus(int err, absl::string_view what);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_FILE_UTIL_H_
