#include "clients/gateway/auth.h"

#include <fstream>

#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

TEST(AuthTest, ChecksBearerKeys) {
  ApiKeys none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Allows(nullptr));

  ApiKeys keys({"k1", "secret-2"});
  EXPECT_TRUE(keys.enabled());
  std::string h;
  EXPECT_FALSE(keys.Allows(nullptr));
  EXPECT_TRUE(keys.Allows(&(h = "Bearer k1")));
  EXPECT_TRUE(keys.Allows(&(h = "bearer secret-2")));
  EXPECT_FALSE(keys.Allows(&(h = "Bearer K1")));  // keys are case-sensitive
  EXPECT_FALSE(keys.Allows(&(h = "Bearer k")));
  EXPECT_FALSE(keys.Allows(&(h = "Basic k1")));
  EXPECT_FALSE(keys.Allows(&(h = "k1")));
  EXPECT_FALSE(keys.Allows(&(h = "Bearer ")));
}

TEST(AuthTest, LoadsKeyFile) {
  std::string path = ::testing::TempDir() + "gateway_auth_test_keys";
  std::ofstream(path) << "# comment\n\n  alpha  \nbeta\n";
  auto keys = ApiKeys::LoadFile(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  std::string h = "Bearer alpha";
  EXPECT_TRUE(keys->Allows(&h));
  std::ofstream(path) << "# only a comment\n";
  EXPECT_FALSE(ApiKeys::LoadFile(path).ok());
  EXPECT_FALSE(ApiKeys::LoadFile(path + ".missing").ok());
}

TEST(AuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace blossom::gateway
