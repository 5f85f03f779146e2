// A JSON Schema compiled into the small grammar the structured-output matcher walks
// (json_matcher.h): a graph of nodes, one per kind of value, that says which JSON texts the
// output may be.
//
// Supported, as vLLM's default backend (xgrammar) supports it: type (one or a list), properties,
// required, additionalProperties, items, minItems, maxItems, minLength, maxLength, pattern
// (ECMA-262's search semantics; regex.h's syntax), format (date, time, date-time, uuid, ipv4,
// email, hostname: each as a regular expression of the RFC's form), enum and const
// (with type beside them at most), anyOf, oneOf (when its alternatives cannot match the same
// value: different kinds of value, or objects told apart by a required property's const or
// enum values), allOf of one schema, and $ref to "#", "#/$defs/..." or "#/definitions/..."
// (recursion included). Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored. Every other keyword
// (minimum, multipleOf, uniqueItems, prefixItems, another format, pattern with a length bound,
// ...) is refused with
// InvalidArgument naming it and where it is, rather than ignored: an output that silently breaks
// the schema is worse than a clear 400.
//
// What the grammar generates is a subset of what the schema accepts, chosen so that every output
// validates: properties come in the schema's order, each optional one may be left out, and no
// property outside `properties` is generated (additionalProperties only shapes objects that have
// no `properties`). Numbers are JSON numbers with at most 16 integer and 16 fraction digits and an
// exponent of at most 2 digits (3 when negative: no number overflows a double); "integer" has no
// fraction or exponent. Strings are JSON strings of valid UTF-8; a \u escape of a surrogate must be
// a high one followed by a low one (the pair is one character).
#ifndef BLOSSOM_ENGINE_GUIDED_JSON_GRAMMAR_H_
#define BLOSSOM_ENGINE_GUIDED_JSON_GRAMMAR_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/guided/regex_dfa.h"

namespace blossom {

// Limits on what a request may ask for: the schema's text, the grammar it compiles to, and each
// enum and property name (the matcher compares them byte by byte at every step).
inline constexpr size_t kMaxJsonSchemaBytes = 64 * 1024;
inline constexpr size_t kMaxJsonGrammarNodes = 4096;
inline constexpr size_t kMaxJsonEnumValues = 1024;
inline constexpr size_t kMaxJsonLiteralBytes = 1024;

// Whitespace bytes in a row where JSON allows whitespace (JsonGrammarOptions::allow_whitespace).
inline constexpr uint8_t kMaxJsonWhitespace = 32;

inline constexpr uint32_t kJsonUnbounded = std::numeric_limits<uint32_t>::max();

// Frames the matcher may stack (json_matcher.h), the one before the value included. A schema
// whose values cannot fit (a required chain nested deeper, or one that never ends) is refused.
inline constexpr uint32_t kMaxJsonOutputDepth = 48;

struct JsonNode {
  enum class Kind : uint8_t { kUnion, kObject, kArray, kString, kNumber, kLiteral };
  Kind kind = Kind::kUnion;
  // kUnion: the value is one of these nodes, none of them a union (nested unions and $ref
  // forwards are flattened at compilation, so a step never walks a union inside a union).
  std::vector<int32_t> alternatives;
  // The fewest matcher frames a value of this node needs, itself included: 1 for a scalar, more
  // for an object whose required properties nest (the matcher never enters a value it could
  // not finish within kMaxJsonOutputDepth).
  uint32_t min_depth = 1;
  // kObject with properties: each key as JSON text (quotes and escapes included), the node of
  // its value, and for each position i the first required property at or after i (keys.size()
  // when none), which bounds the keys that may come next. Without properties, `additional` is
  // the node of every value under any key (-1: no key at all, only {}).
  std::vector<std::string> keys;
  std::vector<int32_t> values;
  std::vector<uint32_t> next_required;
  int32_t additional = -1;
  // kArray: every item's node (-1: no item may appear) and the item count's bounds.
  int32_t items = -1;
  uint32_t min_items = 0;
  uint32_t max_items = kJsonUnbounded;
  // kString: bounds on the length in characters (an escape is one character), and the
  // pattern or format the string's characters match (an index into JsonGrammar::patterns; -1:
  // none). A pattern comes without length bounds.
  uint32_t min_length = 0;
  uint32_t max_length = kJsonUnbounded;
  int32_t pattern = -1;
  // kNumber: no fraction and no exponent.
  bool integer = false;
  // kLiteral: the value is one of these JSON texts, exactly (enum, const, true/false/null).
  std::vector<std::string> literals;
};

// Immutable after compilation; nodes refer to each other by index (a recursive schema is a cycle).
struct JsonGrammar {
  std::vector<JsonNode> nodes;
  std::vector<RegexDfa> patterns;
  int32_t root = -1;
  // Whitespace bytes allowed in a row where JSON allows whitespace (0: a compact text).
  uint8_t max_whitespace = kMaxJsonWhitespace;
};

struct JsonGrammarOptions {
  // Whitespace where JSON allows it (at most kMaxJsonWhitespace bytes in a row, so that a model
  // cannot loop on newlines), or none at all (vLLM's disable_any_whitespace).
  bool allow_whitespace = true;
};

// InvalidArgument naming the problem and its place in the schema ("json schema at
// /properties/age: 'minimum' is not supported").
absl::StatusOr<JsonGrammar> CompileJsonSchema(absl::string_view schema_json,
                                              JsonGrammarOptions options = {});

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_JSON_GRAMMAR_H_
