#include "server/logging/log_setup.h"

#include <chrono>
#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

// spdlog's own names, except "warn" (spdlog says "warning" in full) kept short like the flag.
const char* LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return "trace";
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warn";
    case spdlog::level::err: return "error";
    case spdlog::level::critical: return "critical";
    default: return "off";
  }
}

// RFC 3339 in UTC with microseconds: what log collectors parse without a configured layout.
std::string Timestamp(spdlog::log_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(since_epoch - seconds).count();
  const std::time_t t = static_cast<std::time_t>(seconds.count());
  std::tm utc{};
  gmtime_r(&t, &utc);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", utc.tm_year + 1900,
                         utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                         static_cast<int>(micros));
}

class JsonLogFormatter : public spdlog::formatter {
 public:
  explicit JsonLogFormatter(std::string target) : target_(std::move(target)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    // ordered: timestamp and level first, as collectors and people read them.
    nlohmann::ordered_json line = {
        {"timestamp", Timestamp(msg.time)},
        {"level", LevelName(msg.level)},
        {"target", target_},
        {"thread", msg.thread_id},
        {"message", std::string(msg.payload.data(), msg.payload.size())},
    };
    // replace: a message holding invalid UTF-8 (a client's bytes) still makes a valid line.
    const std::string text = line.dump(-1, ' ', /*ensure_ascii=*/false,
                                       nlohmann::ordered_json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLogFormatter>(target_);
  }

 private:
  const std::string target_;
};

}  // namespace

std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter(std::string target) {
  return std::make_unique<JsonLogFormatter>(std::move(target));
}

absl::Status ConfigureLogging(absl::string_view level, absl::string_view format,
                              std::string target) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  // from_str answers "off" for any name it does not know: only "off" itself may mean off.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-level: '", level, "' is not one of trace, debug, info, warn, error, critical, off"));
  }
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-format: '", format, "' is not one of text, json"));
  }
  spdlog::set_level(parsed);
  if (format == "json") spdlog::set_formatter(MakeJsonLogFormatter(std::move(target)));
  return absl::OkStatus();
}

}  // namespace blossom
