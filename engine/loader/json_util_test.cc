#include "engine/loader/json_util.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string ErrorOf(absl::string_view text) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonStrict(text, "src.json");
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(JsonUtilTest, ParsesValidJson) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonStrict(R"({"a": [1, {"b": 2}]}  )", "x");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["a"][1]["b"], 2);
}

TEST(JsonUtilTest, SyntaxErrorNamesSourceAndPosition) {
  std::string error = ErrorOf("{\"a\": 1,,}");
  EXPECT_THAT(error, HasSubstr("src.json"));
  EXPECT_THAT(error, HasSubstr("invalid JSON"));
  EXPECT_THAT(error, HasSubstr("column 9"));
}

TEST(JsonUtilTest, NulByteIsAnError) {
  // nlohmann would stop at the NUL and accept the prefix.
  EXPECT_THAT(ErrorOf(absl::string_view("{}\0{\"a\": 1}", 12)),
              AllOf(HasSubstr("src.json"), HasSubstr("NUL byte at offset 2")));
}

TEST(JsonUtilTest, DuplicateTopLevelKey) {
  std::string error = ErrorOf(R"({"a": 1, "b": 2, "a": 3})");
  EXPECT_THAT(error, HasSubstr("src.json"));
  EXPECT_THAT(error, HasSubstr("duplicate key 'a' in the top-level object"));
}

TEST(JsonUtilTest, DuplicateNestedKeyNamesPath) {
  std::string error = ErrorOf(R"({"t": {"dtype": "F32", "dtype": "F16"}})");
  EXPECT_THAT(error, HasSubstr("duplicate key 'dtype' in object '/t'"));
}

TEST(JsonUtilTest, DuplicateKeyPathCrossesArrays) {
  EXPECT_THAT(ErrorOf(R"({"a": [{"b": {"c": 1, "c": 2}}]})"),
              HasSubstr("duplicate key 'c' in object '/a/[]/b'"));
}

TEST(JsonUtilTest, NestingIsBounded) {
  auto nested = [](int depth, char open, char close) {
    return std::string(static_cast<size_t>(depth), open) +
           std::string(static_cast<size_t>(depth), close);
  };
  EXPECT_EQ(ErrorOf(nested(kMaxJsonDepth, '[', ']')), "");
  EXPECT_THAT(ErrorOf(nested(kMaxJsonDepth + 1, '[', ']')),
              AllOf(HasSubstr("src.json"), HasSubstr("nested deeper than 128")));
  // A megabyte of openers (a request body at the gateway's limit, not even valid JSON) is refused
  // at depth 129 instead of building a million-level document (and, before, a path per level).
  EXPECT_THAT(ErrorOf(std::string(1 << 20, '[')), HasSubstr("nested deeper than 128"));
  std::string objects;
  for (int i = 0; i < 1000; ++i) objects += "{\"k\":";
  EXPECT_THAT(ErrorOf(objects), HasSubstr("nested deeper than 128"));
}

TEST(JsonUtilTest, SameKeyInSiblingObjectsIsFine) {
  EXPECT_EQ(ErrorOf(R"({"x": {"k": 1}, "y": {"k": 2}, "z": [{"k": 1}, {"k": 2}]})"), "");
}

TEST(JsonUtilTest, IntegerConversions) {
  int64_t i;
  uint64_t u;
  EXPECT_TRUE(JsonToInt64(nlohmann::json(-5), &i));
  EXPECT_EQ(i, -5);
  EXPECT_FALSE(JsonToUint64(nlohmann::json(-5), &u));
  EXPECT_TRUE(JsonToUint64(nlohmann::json(18446744073709551615ull), &u));
  EXPECT_FALSE(JsonToInt64(nlohmann::json(18446744073709551615ull), &i));
  EXPECT_FALSE(JsonToInt64(nlohmann::json(1.0), &i));
  EXPECT_FALSE(JsonToInt64(nlohmann::json("1"), &i));
  EXPECT_FALSE(JsonToInt64(nlohmann::json(true), &i));
}

TEST(JsonUtilTest, DescribeAndSanitize) {
  EXPECT_EQ(DescribeJsonValue(nlohmann::json("x")), "string \"x\"");
  EXPECT_EQ(DescribeJsonValue(nlohmann::json(1.5)), "number 1.5");
  EXPECT_EQ(DescribeJsonValue(nlohmann::json::array()), "array");
  EXPECT_EQ(SanitizeForMessage("a\nb\x01"), "a\\x0ab\\x01");
  EXPECT_EQ(SanitizeForMessage("abcdef", 3), "abc...");
}

TEST(JsonNestingWithinTest, CountsBracketsOutsideStrings) {
  EXPECT_TRUE(JsonNestingWithin(R"({"a": [[1]]})", 3));
  EXPECT_FALSE(JsonNestingWithin(R"({"a": [[1]]})", 2));
  EXPECT_TRUE(JsonNestingWithin(R"({"a": "[[[[\"[["})", 1)) << "brackets in strings do not count";
  EXPECT_TRUE(JsonNestingWithin(std::string(128, '[') + std::string(128, ']')));
  EXPECT_FALSE(JsonNestingWithin(std::string(129, '[')));
}

}  // namespace
}  // namespace blossom
