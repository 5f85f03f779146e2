// Strict JSON parsing for checkpoint metadata (config.json, safetensors headers, shard indexes)
// and the gateway's request bodies.
//
// nlohmann::json silently keeps the last of duplicated keys, and throws on errors; checkpoint
// files are untrusted input, so this wrapper turns every problem into an absl::Status naming the
// source and (for syntax errors) the parser's position, and treats a duplicated key anywhere as an
// error: a header that lists a tensor twice is ambiguous and must not load.
#ifndef BLOSSOM_ENGINE_LOADER_JSON_UTIL_H_
#define BLOSSOM_ENGINE_LOADER_JSON_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/text/sanitize.h"  // SanitizeForMessage, used with these messages
#include "nlohmann/json.hpp"

namespace blossom {

// Objects and arrays nest at most this deep (checkpoint metadata nests 3 levels, API requests a
// handful): deeper input is refused before the parser builds it.
constexpr int kMaxJsonDepth = 128;

// Parses `text`; errors are "<source_name>: ..." with the parser's line/column, the path of the
// object holding a duplicated key, or the depth limit. Never throws; memory linear in the input.
absl::StatusOr<nlohmann::json> ParseJsonStrict(absl::string_view text,
                                               absl::string_view source_name);

// True when `text`'s brackets outside strings nest at most `max_depth` deep. For JSON text that
// is parsed without ParseJsonStrict's limit (an ordered parse, text found inside a string):
// copying, comparing and dumping a parsed value recurse, so its nesting is checked first.
bool JsonNestingWithin(absl::string_view text, int max_depth = kMaxJsonDepth);

// JSON integers as fixed-width values. False for non-integers (1.0, "1", true) and out-of-range
// values; nlohmann stores big integers as either signed or unsigned, both are handled.
bool JsonToInt64(const nlohmann::json& value, int64_t* out);
bool JsonToUint64(const nlohmann::json& value, uint64_t* out);

// "string \"abc\"", "number 1.5", "array", ... for "expected X, got Y" messages.
std::string DescribeJsonValue(const nlohmann::json& value);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_JSON_UTIL_H_
