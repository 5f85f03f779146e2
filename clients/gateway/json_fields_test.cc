#include "clients/gateway/json_fields.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

TEST(JsonFieldsTest, TypedGettersNameTheField) {
  Json obj = Json::parse(R"({"i":5,"f":1.5,"b":true,"s":"x","n":null,"big":18446744073709551615})");
  absl::optional<int64_t> i;
  EXPECT_TRUE(GetInt(obj, "i", 0, 10, &i).ok());
  EXPECT_EQ(*i, 5);
  EXPECT_TRUE(GetInt(obj, "missing", 0, 10, &i).ok());
  EXPECT_FALSE(i.has_value());
  EXPECT_TRUE(GetInt(obj, "n", 0, 10, &i).ok());
  EXPECT_FALSE(i.has_value());
  absl::Status s = GetInt(obj, "f", 0, 10, &i);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamOf(s), "f");
  EXPECT_EQ(s.message(), "f: must be an integer");
  EXPECT_EQ(ParamOf(GetInt(obj, "big", 0, 10, &i)), "big");
  EXPECT_EQ(GetInt(obj, "i", 6, 10, &i).message(), "i: must be at least 6");
  absl::optional<uint64_t> u;
  EXPECT_TRUE(GetUint64(obj, "big", &u).ok());
  EXPECT_EQ(*u, 18446744073709551615ull);
  EXPECT_TRUE(GetUint64(obj, "i", &u).ok());
  EXPECT_EQ(*u, 5u);
  EXPECT_EQ(GetUint64(Json::parse(R"({"s":-1})"), "s", &u).message(), "s: must be at least 0");
  EXPECT_EQ(GetUint64(obj, "f", &u).message(), "f: must be an integer");
  absl::optional<double> f;
  EXPECT_TRUE(GetNumber(obj, "i", &f).ok());  // integers are numbers
  EXPECT_EQ(*f, 5.0);
  EXPECT_FALSE(GetNumber(obj, "s", &f).ok());
  absl::optional<bool> b;
  EXPECT_TRUE(GetBool(obj, "b", &b).ok());
  EXPECT_FALSE(GetBool(obj, "i", &b).ok());
  absl::optional<std::string> str;
  EXPECT_TRUE(GetString(obj, "s", &str).ok());
  EXPECT_FALSE(GetString(obj, "b", &str).ok());
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("plain")), "");
}

TEST(JsonFieldsTest, ParseJsonObjectIsStrict) {
  EXPECT_TRUE(ParseJsonObject(R"({"a":1})").ok());
  EXPECT_FALSE(ParseJsonObject("[]").ok());
  EXPECT_FALSE(ParseJsonObject(R"({"a":NaN})").ok());
  EXPECT_FALSE(ParseJsonObject(R"({"a":-Infinity})").ok());
  EXPECT_FALSE(ParseJsonObject("{\"a\":\"\xc3\x28\"}").ok());
  EXPECT_FALSE(ParseJsonObject(R"({"a":1} trailing)").ok());
  // Issue 14: nlohmann's lexer stops at NUL, so "{...}\0garbage" used to be accepted; and a
  // duplicated key silently kept the last value.
  absl::StatusOr<Json> nul = ParseJsonObject(std::string("{\"a\":1}\0garbage", 15));
  ASSERT_FALSE(nul.ok());
  EXPECT_TRUE(absl::StrContains(nul.status().message(), "NUL")) << nul.status();
  absl::StatusOr<Json> dup = ParseJsonObject(R"({"prompt":"a","prompt":"b"})");
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(absl::StrContains(dup.status().message(), "duplicate key 'prompt'")) << dup.status();
}

TEST(JsonFieldsTest, CheckRangeBounds) {
  EXPECT_TRUE(CheckRange("x", 0.0, 0, false, 1, false).ok());
  EXPECT_FALSE(CheckRange("x", 0.0, 0, true, 1, false).ok());
  EXPECT_FALSE(CheckRange("x", 1.0, 0, true, 1, true).ok());
  EXPECT_TRUE(CheckRange("x", absl::nullopt, 0, true, 1, true).ok());
}

}  // namespace
}  // namespace blossom::gateway
