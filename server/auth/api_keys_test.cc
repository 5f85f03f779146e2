#include "server/auth/api_keys.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

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

// Writes `text` to a fresh file and loads it.
absl::StatusOr<ApiKeys> LoadText(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/keys_text.txt";
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  absl::StatusOr<ApiKeys> keys = ApiKeys::LoadFile(path);
  std::remove(path.c_str());
  return keys;
}

// Lines that no Authorization header could ever match would lock every client out without a
// word: the file is refused, naming the line and the problem but never the key.
TEST(ApiKeysTest, RefusesKeysNoClientCouldPresent) {
  struct Case {
    std::string text;
    int line;
    const char* problem;
  };
  const Case cases[] = {
      {"good-key-0123456789\nBearer sk-abcdefghijklmnop\n", 2, "Bearer"},
      {"# two keys on one line\nkey1-abcdefghijklmn key2-abcdefghijklmn\n", 2, "space or tab"},
      {"key1-abcdefghijklmn\tkey2\n", 1, "space or tab"},
      {"\n\nsecret\x01-abcdefghijklmnop\n", 3, "control or non-ASCII byte at column 7"},
      {"secret-\xc3\xa9-abcdefghijklmnop\n", 1, "control or non-ASCII"},
      {"\xef\xbb\xbfsecret-abcdefghijklmnop\n", 1, "column 1"},  // a UTF-8 byte order mark
      {std::string("secret-abc\0defghijklmnop\n", 25), 1, "control or non-ASCII"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ApiKeys> keys = LoadText(c.text);
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(keys.status().message());
    EXPECT_NE(message.find(" line " + std::to_string(c.line) + ": "), std::string::npos)
        << message;
    EXPECT_NE(message.find(c.problem), std::string::npos) << message;
    for (const char* secret : {"sk-abc", "key1", "key2", "secret", "abcdefghijklmn"}) {
      EXPECT_EQ(message.find(secret), std::string::npos) << "the message quotes a key: " << message;
    }
  }
}

// Surrounding whitespace (CRLF files included) is not part of the key; any other printable
// ASCII byte is.
TEST(ApiKeysTest, AcceptsPrintableAsciiKeysWithSurroundingWhitespace) {
  absl::StatusOr<ApiKeys> keys =
      LoadText("  sk-A1b2C3d4E5f6G7h8\t\r\nkey+/=~!@$%^&*()[]{}\"'<>?,.;:|`_0123\r\n");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->Allows("Bearer sk-A1b2C3d4E5f6G7h8"));
  EXPECT_TRUE(keys->Allows("Bearer key+/=~!@$%^&*()[]{}\"'<>?,.;:|`_0123"));
  EXPECT_TRUE(keys->short_key_lines().empty());
}

// Short keys are accepted (existing deployments keep starting) but reported by line, for the
// server to warn about.
TEST(ApiKeysTest, ReportsShortKeysByLine) {
  absl::StatusOr<ApiKeys> keys =
      LoadText("# keys\nshort\n0123456789abcdef\n\n0123456789abcde\nlonger-than-sixteen\n");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->Allows("Bearer short"));
  EXPECT_TRUE(keys->Allows("Bearer 0123456789abcde"));
  EXPECT_EQ(keys->short_key_lines(), (std::vector<int>{2, 5}));  // 16 characters are enough
  EXPECT_TRUE(ApiKeys({"k"}).short_key_lines().empty());
}

}  // namespace
}  // namespace blossom::auth
