#include "server/auth/exposure.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom::auth {
namespace {

TEST(IsLoopbackHostTest, LoopbackAddressesAndLocalhost) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "[::1]",
                           "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "[::ffff:127.0.0.2]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
}

TEST(IsLoopbackHostTest, EverythingElseIsReachableFromTheNetwork) {
  for (const char* host : {"0.0.0.0", "", "::", "[::]", "10.0.0.5", "192.168.1.1", "128.0.0.1",
                           "::ffff:10.0.0.1", "[::1", "myhost", "localhost.example.com",
                           "127.0.0.1.example.com"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(ExposureWarningsTest, NoneOnLoopback) {
  EXPECT_TRUE(ExposureWarnings("127.0.0.1", /*api_keys=*/false, /*tls=*/false).empty());
  EXPECT_TRUE(ExposureWarnings("[::1]", false, false).empty());
}

TEST(ExposureWarningsTest, NoKeysAndNoTlsOnAnyAddress) {
  std::vector<std::string> warnings = ExposureWarnings("0.0.0.0", false, false);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("no API keys"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("0.0.0.0"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("clear text"), std::string::npos) << warnings[1];
  EXPECT_EQ(warnings[1].find("API keys"), std::string::npos) << warnings[1];
}

TEST(ExposureWarningsTest, KeysWithoutTlsWarnThatKeysTravelInClearText) {
  std::vector<std::string> warnings = ExposureWarnings("0.0.0.0", true, false);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("the API keys cross the network in clear text"), std::string::npos)
      << warnings[0];
}

TEST(ExposureWarningsTest, NoKeysWithTlsStillWarns) {
  std::vector<std::string> warnings = ExposureWarnings("10.0.0.5", false, true);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("no API keys"), std::string::npos) << warnings[0];
  EXPECT_TRUE(ExposureWarnings("10.0.0.5", true, true).empty());
}

TEST(ReflectionEnabledTest, AutoFollowsTheKeys) {
  EXPECT_EQ(ReflectionEnabled("auto", /*api_keys=*/false).value(), true);
  EXPECT_EQ(ReflectionEnabled("auto", /*api_keys=*/true).value(), false);
  EXPECT_EQ(ReflectionEnabled("AUTO", true).value(), false);
}

TEST(ReflectionEnabledTest, AnExplicitValueWins) {
  for (bool keys : {false, true}) {
    for (const char* on : {"true", "1", "yes", "on", "TRUE"}) {
      EXPECT_EQ(ReflectionEnabled(on, keys).value(), true) << on;
    }
    for (const char* off : {"false", "0", "no", "off"}) {
      EXPECT_EQ(ReflectionEnabled(off, keys).value(), false) << off;
    }
  }
}

TEST(ReflectionEnabledTest, RefusesOtherValues) {
  for (const char* bad : {"", "maybe", "on-ish", "2"}) {
    absl::StatusOr<bool> enabled = ReflectionEnabled(bad, false);
    ASSERT_FALSE(enabled.ok()) << bad;
    EXPECT_EQ(enabled.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(enabled.status().message().find("--grpc_reflection"), std::string::npos);
  }
}

}  // namespace
}  // namespace blossom::auth
