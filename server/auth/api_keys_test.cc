#include "server/auth/api_keys.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace blossom::auth {
namespace {

TEST(BearerTokenTest, SchemeIsCaseInsensitiveAndSpacesAreTolerated) {
  for (const char* value : {"Bearer k1", "bearer k1", "BEARER k1", "BeArEr   k1", " Bearer\tk1 ",
                            "Bearer k1\t"}) {
    ASSERT_TRUE(BearerToken(value).has_value()) << value;
    EXPECT_EQ(*BearerToken(value), "k1") << value;
  }
  for (const char* value : {"", "Bearer", "Bearer ", "Bearerk1", "Basic k1", "Bearer k 1", "k1",
                            "Token k1"}) {
    EXPECT_FALSE(BearerToken(value).has_value()) << value;
  }
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0", 3), "ab"));
}

TEST(ApiKeysTest, AllowsConfiguredKeysOnly) {
  ApiKeys keys({"secret-one", "secret-two"});
  EXPECT_TRUE(keys.enabled());
  EXPECT_TRUE(keys.Allows("Bearer secret-one"));
  EXPECT_TRUE(keys.Allows("bearer  secret-two"));
  EXPECT_FALSE(keys.Allows("Bearer secret-on"));
  EXPECT_FALSE(keys.Allows("Bearer secret-one2"));
  EXPECT_FALSE(keys.Allows("secret-one"));
  EXPECT_FALSE(keys.Allows(static_cast<const std::string*>(nullptr)));
  ApiKeys none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Allows(static_cast<const std::string*>(nullptr)));
}

TEST(ApiKeysTest, LoadsFileSkippingCommentsAndBlankLines) {
  const std::string path = ::testing::TempDir() + "/keys.txt";
  {
    std::ofstream out(path);
    out << "# comment\n\n  key-a  \nkey-b\n";
  }
  auto keys = ApiKeys::LoadFile(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->Allows("Bearer key-a"));
  EXPECT_TRUE(keys->Allows("Bearer key-b"));
  EXPECT_FALSE(keys->Allows("Bearer # comment"));
  {
    std::ofstream out(path);
    out << "# only a comment\n";
  }
  EXPECT_FALSE(ApiKeys::LoadFile(path).ok());
  EXPECT_FALSE(ApiKeys::LoadFile(path + ".missing").ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace blossom::auth
