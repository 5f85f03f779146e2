// Test-only helpers: locating Bazel runfiles and reading them.
#ifndef BLOSSOM_ENGINE_TOKENIZER_TEST_UTIL_H_
#define BLOSSOM_ENGINE_TOKENIZER_TEST_UTIL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom {

// Absolute path of a data dependency given relative to the workspace root, from the
// TEST_SRCDIR / TEST_WORKSPACE variables `bazel test` sets (workspace "blossom" if unset).
std::string RunfilePath(absl::string_view workspace_relative);

// Whole file contents; NotFound if it cannot be opened.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_TOKENIZER_TEST_UTIL_H_
