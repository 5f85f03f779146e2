#include "tools/cli/dashed_flags.h"

#include <cstring>
#include <string>

#include "absl/flags/reflection.h"

namespace blossom {
namespace {

// The flag an argument names ("--name", "--name=value", "-name", and "--noname" for a bool),
// with dashes in the name read as underscores; null when it names none.
const absl::CommandLineFlag* NamedFlag(const char* arg, std::string* name, bool* has_value) {
  const char* start = arg + (arg[1] == '-' ? 2 : 1);
  const char* end = std::strchr(start, '=');
  *has_value = end != nullptr;
  name->assign(start, end != nullptr ? end : start + std::strlen(start));
  for (char& c : *name) {
    if (c == '-') c = '_';
  }
  if (const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(*name)) return flag;
  // Abseil's false for a bool is --noname; --no-name is the dashed spelling of it.
  for (const char* prefix : {"no_", "no"}) {
    if (name->rfind(prefix, 0) != 0) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name->substr(std::strlen(prefix)));
    if (flag != nullptr && flag->IsOfType<bool>()) {
      *name = "no" + name->substr(std::strlen(prefix));
      return flag;
    }
  }
  return nullptr;
}

}  // namespace

void NormalizeDashedFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (std::strcmp(arg, "--") == 0) return;  // the rest are positional arguments
    if (arg[0] != '-' || arg[1] == '\0') continue;
    std::string name;
    bool has_value = false;
    const absl::CommandLineFlag* flag = NamedFlag(arg, &name, &has_value);
    if (flag == nullptr) continue;  // not a flag: Abseil names it in its own error
    if (arg[1] == '-') {
      // The name as Abseil spells it, in place: never longer than what was written.
      const char* value = std::strchr(arg, '=');
      const std::string rewritten = "--" + name + (value != nullptr ? value : "");
      std::memcpy(arg, rewritten.c_str(), rewritten.size() + 1);
    }
    // `--flag value`: the next argument is the value, whatever it looks like ("--END--", a
    // prompt of "---" front matter): never rewritten.
    if (!has_value && !flag->IsOfType<bool>()) ++i;
  }
}

}  // namespace blossom
