#include "server/metrics/promtool_test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace blossom::metrics {

int RunPromtool(const std::string& text, std::string* output) {
  std::string promtool;
  for (const char* p : {"/usr/bin/promtool", "/usr/local/bin/promtool", "/bin/promtool"}) {
    if (access(p, X_OK) == 0) {
      promtool = p;
      break;
    }
  }
  if (promtool.empty()) return -1;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/metrics_promtool_input.txt";
  std::ofstream(path) << text;
  FILE* pipe = popen((promtool + " check metrics < " + path + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr) *output += buf;
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace blossom::metrics
