// Log setup shared by blossom-server and blossom-gateway: the level and the line format.
//
// "text" (the default) is spdlog's human format. "json" writes one JSON object per line, for log
// collectors (Loki, Elasticsearch, Cloud Logging), as TGI's --json-output does:
//   {"timestamp":"2026-11-28T15:52:15.123456Z","level":"info","target":"blossom-server",
//    "thread":1234,"message":"request_id=... finish_reason=stop ..."}
// Every string is JSON-escaped (quotes, backslashes, control characters; invalid UTF-8 replaced
// by U+FFFD), so nothing a client sent can end a line early or forge another.
#ifndef BLOSSOM_SERVER_LOGGING_LOG_SETUP_H_
#define BLOSSOM_SERVER_LOGGING_LOG_SETUP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"

namespace blossom {

// The JSON line formatter ("json" above). `target` names the program.
std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter(std::string target);

// Sets the default logger's level ("trace", "debug", "info", "warn", "error", "critical",
// "off") and format ("text" or "json"). InvalidArgument naming the flag for anything else, and
// then nothing is changed.
absl::Status ConfigureLogging(absl::string_view level, absl::string_view format,
                              std::string target);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_LOGGING_LOG_SETUP_H_
