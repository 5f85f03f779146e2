#include "clients/gateway/content_type.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

bool Accepts(const std::string& value) { return AcceptsAsJson(&value); }

TEST(ContentTypeTest, NoHeaderIsAccepted) { EXPECT_TRUE(AcceptsAsJson(nullptr)); }

TEST(ContentTypeTest, JsonWithParametersAndAnyCase) {
  for (const char* value : {"application/json", "application/json; charset=utf-8",
                            "Application/JSON;charset=UTF-8", "  application/json  ",
                            "application/merge-patch+json", "application/vnd.api+json; v=1"}) {
    EXPECT_TRUE(Accepts(value)) << value;
  }
}

// What a browser sends across sites without a preflight, and other types that are not JSON.
TEST(ContentTypeTest, EverythingElseIsRefused) {
  for (const char* value :
       {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=----x", "", " ", "text/json", "application/jsonp",
        "application/+json", "application/json+x", "application/a/b+json",
        "application/x, application/json", "application", "json"}) {
    EXPECT_FALSE(Accepts(value)) << value;
  }
}

}  // namespace
}  // namespace blossom::gateway
