#include "engine/loader/json_util.h"

#include <limits>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace blossom {
namespace {

using nlohmann::json;

// Thrown from the parse callback to stop at once (the callback's `false` only discards a value;
// the parser would still walk the whole nesting).
struct TooDeep {};

// Tracks the keys of every open object during a callback parse, to detect duplicates (which the
// DOM builder would otherwise merge, keeping the last), and refuses nesting deeper than
// kMaxJsonDepth. Memory is linear in the input: a frame keeps only its own keys, and the path
// of an object is built only for the error message.
class DuplicateKeyDetector {
 public:
  bool OnEvent(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (frames_.size() >= static_cast<size_t>(kMaxJsonDepth)) throw TooDeep{};
        frames_.push_back(Frame{event == json::parse_event_t::object_start, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      case json::parse_event_t::key:
        if (!frames_.empty() && parsed.is_string()) {
          Frame& frame = frames_.back();
          frame.last_key = parsed.get_ref<const std::string&>();
          if (!frame.keys.insert(frame.last_key).second && error_.empty()) {
            const std::string path = PathOfInnermost();
            error_ = absl::StrCat("duplicate key '", SanitizeForMessage(frame.last_key), "' in ",
                                  path.empty()
                                      ? std::string("the top-level object")
                                      : absl::StrCat("object '", SanitizeForMessage(path), "'"));
          }
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;  // keep everything: we only observe
  }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    std::string last_key;
  };
  // "/a/[]/b": the keys (and arrays) leading to the innermost open object; "" for the root.
  std::string PathOfInnermost() const {
    std::string path;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      absl::StrAppend(&path, "/", frames_[i].is_object ? frames_[i].last_key : "[]");
    }
    return path;
  }
  std::vector<Frame> frames_;
  std::string error_;
};

}  // namespace

absl::StatusOr<json> ParseJsonStrict(absl::string_view text, absl::string_view source_name) {
  // nlohmann's lexer treats a NUL byte as the end of input (for C strings), so "{}\0junk" would
  // parse as "{}". JSON text can never contain a raw NUL, so reject it up front.
  size_t nul = text.find('\0');
  if (nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": invalid JSON: NUL byte at offset ", nul));
  }
  DuplicateKeyDetector detector;
  json result;
  try {
    result = json::parse(
        text.data(), text.data() + text.size(),
        [&detector](int /*depth*/, json::parse_event_t event, json& parsed) {
          return detector.OnEvent(event, parsed);
        },
        /*allow_exceptions=*/true);
  } catch (const TooDeep&) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ": invalid JSON: nested deeper than ", kMaxJsonDepth, " objects and arrays"));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": invalid JSON: ", SanitizeForMessage(e.what(), 400)));
  } catch (const std::exception& e) {  // e.g. bad_alloc on an absurd document
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": cannot parse JSON: ", SanitizeForMessage(e.what(), 400)));
  }
  if (!detector.error().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": ", detector.error()));
  }
  return result;
}

bool JsonToInt64(const json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return true;
  }
  return false;
}

bool JsonToUint64(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

std::string DescribeJsonValue(const json& value) {
  switch (value.type()) {
    case json::value_t::string:
      return absl::StrCat("string \"", SanitizeForMessage(value.get_ref<const std::string&>(), 40),
                          "\"");
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
    case json::value_t::boolean:
      // Numbers and booleans only: dump() cannot hit its invalid-UTF-8 exception here.
      return absl::StrCat(value.type_name(), " ", value.dump());
    default:
      return value.type_name();
  }
}

bool JsonNestingWithin(absl::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

}  // namespace blossom
