#include "engine/text/sanitize.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(SanitizeForMessageTest, EscapesControlAndNonAsciiBytes) {
  EXPECT_EQ(SanitizeForMessage("plain text"), "plain text");
  EXPECT_EQ(SanitizeForMessage("a\nb\r\t"), "a\\x0ab\\x0d\\x09");
  EXPECT_EQ(SanitizeForMessage("\xc3\xa9"), "\\xc3\\xa9");
  EXPECT_EQ(SanitizeForMessage(std::string("a\0b", 3)), "a\\x00b");
}

TEST(SanitizeForMessageTest, CutsLongText) {
  EXPECT_EQ(SanitizeForMessage(std::string(1 << 20, 'x'), 5), "xxxxx...");
  EXPECT_EQ(SanitizeForMessage("abc", 3), "abc");
}

}  // namespace
}  // namespace blossom
