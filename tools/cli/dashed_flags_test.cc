#include "tools/cli/dashed_flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

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

TEST(DashedFlagsTest, LeavesProgramNameAndEdgeCases) {
  EXPECT_EQ(Normalize({"my-prog", "--", "--a-b"}),
            std::vector<std::string>({"my-prog", "--", "--a-b"}));
  EXPECT_EQ(Normalize({"p", "--=x-y", "--a-=-"}), std::vector<std::string>({"p", "--=x-y", "--a_=-"}));
}

}  // namespace
}  // namespace blossom
