#include "engine/loader/file_util.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::HasSubstr;

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(FileUtilTest, JoinAndBaseName) {
  EXPECT_EQ(JoinPath("a/b", "c"), "a/b/c");
  EXPECT_EQ(JoinPath("a/b/", "c"), "a/b/c");
  EXPECT_EQ(JoinPath("", "c"), "c");
  EXPECT_EQ(BaseName("a/b/c.json"), "c.json");
  EXPECT_EQ(BaseName("c.json"), "c.json");
}

TEST(FileUtilTest, WriteReadRoundTrip) {
  std::string path = JoinPath(TmpDir(), "roundtrip.bin");
  std::string contents("a\0b\xff", 4);
  ASSERT_TRUE(WriteStringToFile(path, contents).ok());
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
  EXPECT_EQ(GetPathKind(path), PathKind::kRegularFile);
  EXPECT_EQ(GetPathKind(TmpDir()), PathKind::kDirectory);
}

TEST(FileUtilTest, MissingFileIsNotFoundAndNamesPath) {
  std::string path = JoinPath(TmpDir(), "does_not_exist.json");
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(absl::IsNotFound(read.status()));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("No such file"));
  EXPECT_EQ(GetPathKind(path), PathKind::kMissing);
}

TEST(FileUtilTest, ReadingADirectoryFails) {
  absl::StatusOr<std::string> read = ReadFileToString(TmpDir());
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("is a directory"));
}

}  // namespace
}  // namespace blossom
