#include "server/logging/log_setup.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spdlog/logger.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

// Logs `messages` through the JSON formatter; the lines written.
std::vector<std::string> JsonLines(const std::vector<std::pair<spdlog::level::level_enum,
                                                               std::string>>& messages) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  spdlog::logger logger("test", sink);
  logger.set_level(spdlog::level::trace);
  logger.set_formatter(MakeJsonLogFormatter("blossom-test"));
  for (const auto& [level, text] : messages) logger.log(level, "{}", text);
  logger.flush();
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  return lines;
}

TEST(JsonLogFormatterTest, OneParsableObjectPerLineWithItsFields) {
  const std::vector<std::string> lines =
      JsonLines({{spdlog::level::info, "request_id=abc finish_reason=stop"},
                 {spdlog::level::warn, "careful"},
                 {spdlog::level::err, "broken"}});
  ASSERT_EQ(lines.size(), 3u);
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["message"], "request_id=abc finish_reason=stop");
  EXPECT_EQ(first["level"], "info");
  EXPECT_EQ(first["target"], "blossom-test");
  EXPECT_TRUE(first["thread"].is_number_unsigned());
  const std::string timestamp = first["timestamp"];
  // 2026-11-28T15:52:15.123456Z
  ASSERT_EQ(timestamp.size(), 27u) << timestamp;
  EXPECT_EQ(timestamp[10], 'T');
  EXPECT_EQ(timestamp[19], '.');
  EXPECT_EQ(timestamp.back(), 'Z');
  EXPECT_EQ(nlohmann::json::parse(lines[1])["level"], "warn");
  EXPECT_EQ(nlohmann::json::parse(lines[2])["level"], "error");
}

// What a client sends (a request id, a prompt in an error) cannot end the line or forge one.
TEST(JsonLogFormatterTest, ClientBytesStayInsideTheirStringOnOneLine) {
  const std::string forged =
      "x\"}\n{\"level\":\"error\",\"message\":\"forged\"}\r\t\\ \x01 \xff\xfe end";
  const std::vector<std::string> lines = JsonLines({{spdlog::level::info, forged}});
  ASSERT_EQ(lines.size(), 1u) << "the message broke the line";
  const nlohmann::json line = nlohmann::json::parse(lines[0]);
  const std::string message = line["message"];
  EXPECT_EQ(line["level"], "info");
  EXPECT_NE(message.find("\"level\":\"error\""), std::string::npos) << "kept as text";
  EXPECT_NE(message.find('\n'), std::string::npos);
  EXPECT_NE(message.find("\xef\xbf\xbd"), std::string::npos) << "invalid UTF-8 is U+FFFD";
  EXPECT_NE(message.find(" end"), std::string::npos);
}

TEST(ConfigureLoggingTest, UnknownLevelsAndFormatsAreRefusedNamingTheFlag) {
  spdlog::set_level(spdlog::level::info);
  absl::Status level = ConfigureLogging("verbose", "text", "t");
  EXPECT_TRUE(absl::IsInvalidArgument(level));
  EXPECT_NE(level.message().find("--log-level"), std::string::npos) << level;
  absl::Status format = ConfigureLogging("debug", "xml", "t");
  EXPECT_TRUE(absl::IsInvalidArgument(format));
  EXPECT_NE(format.message().find("--log-format"), std::string::npos) << format;
  EXPECT_EQ(spdlog::get_level(), spdlog::level::info) << "a refused call changed the level";
  EXPECT_TRUE(ConfigureLogging("off", "text", "t").ok());
  EXPECT_EQ(spdlog::get_level(), spdlog::level::off);
  EXPECT_TRUE(ConfigureLogging("warn", "json", "t").ok());
  EXPECT_EQ(spdlog::get_level(), spdlog::level::warn);
}

}  // namespace
}  // namespace blossom
