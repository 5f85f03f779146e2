// Locates committed test fixtures (tests/fixtures/...) from inside a Bazel test.
#ifndef BLOSSOM_TESTS_UTIL_FIXTURE_PATH_H_
#define BLOSSOM_TESTS_UTIL_FIXTURE_PATH_H_

#include <string>

namespace blossom {

// Absolute path of `relative` under tests/fixtures in the test's runfiles (the test target must
// list the file in `data`). Falls back to the source tree when run outside Bazel.
std::string FixturePath(const std::string& relative);

// Whole file contents; empty string if it cannot be read (tests then fail on the content).
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace blossom

#endif  // BLOSSOM_TESTS_UTIL_FIXTURE_PATH_H_
