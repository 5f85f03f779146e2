#include "tools/cli/dashed_flags.h"

#include <cstring>

namespace blossom {

void NormalizeDashedFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (std::strcmp(arg, "--") == 0) return;  // the rest are positional arguments
    if (std::strncmp(arg, "--", 2) != 0 || arg[2] == '\0') continue;
    for (char* c = arg + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
}

}  // namespace blossom
