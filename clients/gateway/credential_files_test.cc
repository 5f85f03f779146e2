#include "clients/gateway/credential_files.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

std::string WriteFile(const std::string& name, const std::string& contents) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(CredentialFilesTest, ApiKeyFileIsTrimmed) {
  absl::StatusOr<std::string> key =
      ReadApiKeyFile("--api_key_file", WriteFile("key1", "  sk-abc.123_x\r\n\n"));
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, "sk-abc.123_x");
}

TEST(CredentialFilesTest, EmptyUnreadableOrUnsendableKeyFilesAreErrors) {
  for (const char* contents : {"", " \n\t\n"}) {
    absl::StatusOr<std::string> key = ReadApiKeyFile("--api_key_file", WriteFile("empty", contents));
    ASSERT_FALSE(key.ok());
    EXPECT_TRUE(absl::StrContains(key.status().message(), "holds no key")) << key.status();
  }
  absl::StatusOr<std::string> missing = ReadApiKeyFile("--backend-api-key-file", "/nonexistent/k");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "--backend-api-key-file: cannot read /nonexistent/k");
  // Two keys, or a key with a space or a control byte, cannot be one Bearer token; the message
  // does not quote the key (it ends up in logs).
  for (const char* contents : {"key-one\nkey-two\n", "secret key", "secret\x01key"}) {
    absl::StatusOr<std::string> key = ReadApiKeyFile("--api_key_file", WriteFile("bad", contents));
    ASSERT_FALSE(key.ok()) << contents;
    EXPECT_FALSE(absl::StrContains(key.status().message(), "secret")) << key.status();
    EXPECT_FALSE(absl::StrContains(key.status().message(), "key-one")) << key.status();
  }
}

TEST(CredentialFilesTest, CheckApiKeyNamesTheSource) {
  EXPECT_TRUE(CheckApiKey("BLOSSOM_API_KEY", "abc").ok());
  absl::Status empty = CheckApiKey("BLOSSOM_API_KEY", "");
  EXPECT_EQ(empty.message(), "BLOSSOM_API_KEY: the key is empty");
  absl::Status spaced = CheckApiKey("--api_key", "a b");
  EXPECT_TRUE(absl::StartsWith(spaced.message(), "--api_key: the key has a space")) << spaced;
}

TEST(CredentialFilesTest, PemFiles) {
  absl::StatusOr<std::string> pem =
      ReadPemFile("--tls_cert", WriteFile("cert.pem", "-----BEGIN CERTIFICATE-----\n"));
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_EQ(*pem, "-----BEGIN CERTIFICATE-----\n");
  absl::StatusOr<std::string> empty = ReadPemFile("--tls_ca", "/dev/null");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "--tls_ca: /dev/null is empty");
  EXPECT_FALSE(ReadPemFile("--tls_key", "/nonexistent/key.pem").ok());
}

}  // namespace
}  // namespace blossom::gateway
