#include "clients/gateway/content_type.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace blossom::gateway {

bool AcceptsAsJson(const std::string* content_type) {
  if (content_type == nullptr) return true;
  // The media type is what precedes the parameters; names are case-insensitive (RFC 9110 8.3.1).
  absl::string_view value = *content_type;
  const std::string media_type =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(value.substr(0, value.find(';'))));
  absl::string_view subtype = media_type;
  if (!absl::ConsumePrefix(&subtype, "application/")) return false;
  if (subtype == "json") return true;
  // A "+json" suffix after a non-empty name of token characters (no second type, no list).
  if (!absl::ConsumeSuffix(&subtype, "+json") || subtype.empty()) return false;
  return std::all_of(subtype.begin(), subtype.end(), [](char c) {
    return absl::ascii_isalnum(c) || absl::StrContains("!#$&-^_.+", c);
  });
}

}  // namespace blossom::gateway
