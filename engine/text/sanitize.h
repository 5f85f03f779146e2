// Untrusted text made safe for error messages and log lines.
#ifndef BLOSSOM_ENGINE_TEXT_SANITIZE_H_
#define BLOSSOM_ENGINE_TEXT_SANITIZE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace blossom {

// Control and non-ASCII bytes become \xNN (so a "\n" cannot forge a log line and no invalid
// UTF-8 reaches a JSON encoder), and text longer than `max_len` bytes is cut there with "..."
// appended (so a 1 MB input cannot make a 1 MB log line or error).
std::string SanitizeForMessage(absl::string_view text, size_t max_len = 120);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_TEXT_SANITIZE_H_
