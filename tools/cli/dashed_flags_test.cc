#include "tools/cli/dashed_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int32_t, max_new_tokens, 0, "test flag");
ABSL_FLAG(std::string, stop, "", "test flag");
ABSL_FLAG(std::string, prompt, "", "test flag");
ABSL_FLAG(int32_t, top_k, 0, "test flag");
ABSL_FLAG(bool, ignore_eos, false, "test flag");

namespace blossom {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  NormalizeDashedFlags(static_cast<int>(argv.size()), argv.data());
  std::vector<std::string> out;
  for (char* a : argv) out.emplace_back(a);
  return out;
}

TEST(DashedFlagsTest, RewritesNamesOnly) {
  EXPECT_EQ(Normalize({"prog", "--max-new-tokens=5", "--stop=a-b", "--top-k", "-3", "gen-erate",
                       "-x-y", "--", "--keep-me"}),
            std::vector<std::string>({"prog", "--max_new_tokens=5", "--stop=a-b", "--top_k", "-3",
                                      "gen-erate", "-x-y", "--", "--keep-me"}));
}

// The value after a flag that takes one is never a flag name, whatever it starts with.
TEST(DashedFlagsTest, ValuesThatLookLikeFlagsAreUntouched) {
  EXPECT_EQ(Normalize({"prog", "--prompt", "---\ntitle: my-doc\n---", "--stop", "--END--",
                       "--ignore-eos", "--max-new-tokens", "5", "--stop", "--max-new-tokens"}),
            std::vector<std::string>({"prog", "--prompt", "---\ntitle: my-doc\n---", "--stop",
                                      "--END--", "--ignore_eos", "--max_new_tokens", "5",
                                      "--stop", "--max-new-tokens"}));
  // A bool takes no separate value; --no<bool> (Abseil's) and --no-<bool> are its false.
  EXPECT_EQ(Normalize({"prog", "--no-ignore-eos", "--noignore-eos", "--top-k", "--x-y"}),
            std::vector<std::string>({"prog", "--noignore_eos", "--noignore_eos", "--top_k",
                                      "--x-y"}));
}

TEST(DashedFlagsTest, LeavesProgramNameUnknownFlagsAndEdgeCases) {
  EXPECT_EQ(Normalize({"my-prog", "--", "--a-b"}),
            std::vector<std::string>({"my-prog", "--", "--a-b"}));
  EXPECT_EQ(Normalize({"p", "--=x-y", "--not-a-flag=-", "-", "--"}),
            std::vector<std::string>({"p", "--=x-y", "--not-a-flag=-", "-", "--"}));
}

}  // namespace
}  // namespace blossom
