#include "tests/util/fixture_path.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace blossom {

std::string FixturePath(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr) {
    return std::string(srcdir) + "/" + (workspace ? workspace : "blossom") + "/tests/fixtures/" +
           relative;
  }
  return "tests/fixtures/" + relative;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace blossom
