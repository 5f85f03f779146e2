#include "engine/guided/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/guided/json_grammar_analysis.h"
#include "engine/loader/json_util.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

// ordered_json keeps the schema's property order, which is the order the output follows.
using Json = nlohmann::ordered_json;

// Nesting of schemas inside schemas (not of the output): deeper is refused, so that compiling
// cannot exhaust the stack.
constexpr int kMaxSchemaDepth = 64;
// Brackets open at once in the schema's text (enum and const values included).
constexpr int kMaxSchemaNesting = 128;
// DFA transitions over all of a schema's patterns and formats.
constexpr size_t kMaxPatternEntries = 1 << 20;

const std::set<std::string>& Annotations() {
  static const auto* kSet = new std::set<std::string>{
      "title",    "description", "default",   "examples",  "$schema", "$id",
      "$comment", "deprecated",  "readOnly",  "writeOnly", "$defs",   "definitions"};
  return *kSet;
}

const std::set<std::string>& Supported() {
  static const auto* kSet = new std::set<std::string>{
      "type",     "properties", "required",  "additionalProperties", "items", "minItems",
      "maxItems", "minLength",  "maxLength", "enum",                 "const", "anyOf",
      "oneOf",    "allOf",      "$ref",      "pattern",              "format"};
  return *kSet;
}

bool Has(const Json& s, const char* key) { return s.contains(key); }

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {}

  absl::StatusOr<int32_t> Compile(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) {
      return Error(path, absl::StrCat("schemas nest deeper than ", kMaxSchemaDepth));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return AnyNode();
      return Error(path, "the schema false allows no value");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    size_t constraints = 0;
    for (const auto& item : s.items()) {
      if (Annotations().count(item.key()) != 0) continue;
      if (Supported().count(item.key()) == 0) {
        return Error(path, absl::StrCat("'", item.key().substr(0, 64), "' is not supported"));
      }
      ++constraints;
    }
    for (const char* alone : {"$ref", "anyOf", "oneOf", "allOf"}) {
      if (Has(s, alone) && constraints > 1) {
        return Error(path, absl::StrCat("'", alone,
                                        "' beside other constraints is not supported"));
      }
    }
    if (Has(s, "$ref")) return CompileRef(s["$ref"], path, depth);
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!Has(s, keyword)) continue;
      absl::StatusOr<int32_t> u = CompileUnion(s[keyword], absl::StrCat(path, "/", keyword), depth);
      if (u.ok() && std::string(keyword) == "oneOf") {
        one_of_.push_back({*u, grammar_.nodes[*u].alternatives, path});
      }
      return u;
    }
    if (Has(s, "allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return Error(path, "'allOf' is supported with exactly one schema");
      }
      return Compile(all[0], absl::StrCat(path, "/allOf/0"), depth + 1);
    }
    if (Has(s, "enum") || Has(s, "const")) {
      // The literals are the whole grammar of the value: a bound beside them (maxLength, ...)
      // would be ignored, so it is refused; type filters them.
      for (const auto& item : s.items()) {
        const std::string& key = item.key();
        if (Annotations().count(key) == 0 && key != "enum" && key != "const" && key != "type") {
          return Error(path, absl::StrCat("'", key.substr(0, 64),
                                          "' beside enum or const is not supported"));
        }
      }
    }
    absl::StatusOr<std::set<std::string>> types = Types(s, path);
    if (!types.ok()) return types.status();
    // A format names a string's form here; on numbers ("int32", ...) it would be ignored.
    if (Has(s, "format") && types->count("string") == 0) {
      return Error(path, "'format' is supported on strings only");
    }
    if (Has(s, "enum") || Has(s, "const")) return CompileLiterals(s, *types, path);
    if (types->empty()) return AnyNode();
    std::vector<int32_t> alternatives;
    for (const std::string& type : *types) {
      absl::StatusOr<int32_t> node = CompileType(s, type, path, depth);
      if (!node.ok()) return node.status();
      alternatives.push_back(*node);
    }
    if (alternatives.size() == 1) return alternatives[0];
    JsonNode u;
    u.kind = JsonNode::Kind::kUnion;
    u.alternatives = std::move(alternatives);
    return NewNode(std::move(u), path);
  }

  JsonGrammar Take() && { return std::move(grammar_); }
  std::vector<OneOfUse> TakeOneOfs() && { return std::move(one_of_); }

 private:
  static absl::Status Error(const std::string& path, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("json schema at ", path.empty() ? "/" : path.substr(0, 128), ": ", what));
  }

  absl::StatusOr<int32_t> NewNode(JsonNode node, const std::string& path) {
    if (grammar_.nodes.size() >= kMaxJsonGrammarNodes) {
      return Error(path, absl::StrCat("the schema needs more than ", kMaxJsonGrammarNodes,
                                      " grammar nodes"));
    }
    grammar_.nodes.push_back(std::move(node));
    return static_cast<int32_t>(grammar_.nodes.size() - 1);
  }

  // Any JSON value: one shared set of nodes, whose objects and arrays hold any value again.
  int32_t AnyNode() {
    if (any_ >= 0) return any_;
    auto add = [&](JsonNode n) {
      grammar_.nodes.push_back(std::move(n));
      return static_cast<int32_t>(grammar_.nodes.size() - 1);
    };
    JsonNode u;
    u.kind = JsonNode::Kind::kUnion;
    any_ = add(std::move(u));
    JsonNode object;
    object.kind = JsonNode::Kind::kObject;
    object.additional = any_;
    object.next_required = {0};
    JsonNode array;
    array.kind = JsonNode::Kind::kArray;
    array.items = any_;
    JsonNode string;
    string.kind = JsonNode::Kind::kString;
    JsonNode number;
    number.kind = JsonNode::Kind::kNumber;
    JsonNode literal;
    literal.kind = JsonNode::Kind::kLiteral;
    literal.literals = {"true", "false", "null"};
    std::vector<int32_t> alternatives = {add(std::move(object)), add(std::move(array)),
                                         add(std::move(string)), add(std::move(number)),
                                         add(std::move(literal))};
    grammar_.nodes[any_].alternatives = std::move(alternatives);
    return any_;
  }

  absl::StatusOr<int32_t> CompileRef(const Json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Error(path, "'$ref' must be a string");
    const std::string name = ref.get<std::string>();
    if (auto it = refs_.find(name); it != refs_.end()) return it->second;
    const Json* target = nullptr;
    if (name == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (name.compare(0, p.size(), p) != 0) continue;
        const std::string section = p.substr(2, p.size() - 3);
        const std::string key = name.substr(p.size());
        if (root_.is_object() && root_.contains(section) && root_[section].is_object() &&
            root_[section].contains(key)) {
          target = &root_[section][key];
        }
      }
    }
    if (target == nullptr) {
      return Error(path, absl::StrCat("'$ref' ", name.substr(0, 64),
                                      " is not \"#\" or a schema under #/$defs or #/definitions"));
    }
    // A placeholder first, so that a recursive reference finds it; it forwards to the target.
    JsonNode forward;
    forward.kind = JsonNode::Kind::kUnion;
    absl::StatusOr<int32_t> index = NewNode(std::move(forward), path);
    if (!index.ok()) return index.status();
    refs_[name] = *index;
    absl::StatusOr<int32_t> body = Compile(*target, name.substr(1), depth + 1);
    if (!body.ok()) return body.status();
    grammar_.nodes[*index].alternatives = {*body};
    return *index;
  }

  absl::StatusOr<int32_t> CompileUnion(const Json& list, const std::string& path, int depth) {
    if (!list.is_array() || list.empty()) return Error(path, "must be a non-empty array");
    JsonNode u;
    u.kind = JsonNode::Kind::kUnion;
    for (size_t i = 0; i < list.size(); ++i) {
      absl::StatusOr<int32_t> node = Compile(list[i], absl::StrCat(path, "/", i), depth + 1);
      if (!node.ok()) return node.status();
      u.alternatives.push_back(*node);
    }
    return NewNode(std::move(u), path);
  }

  // The schema's types: "type" (a name or a list of names), else inferred from the keywords
  // present; none of either (empty) = any value.
  absl::StatusOr<std::set<std::string>> Types(const Json& s, const std::string& path) {
    static const std::set<std::string> kNames = {"object", "array",   "string", "number",
                                                 "integer", "boolean", "null"};
    std::set<std::string> types;
    if (Has(s, "type")) {
      const Json& t = s["type"];
      std::vector<Json> names = t.is_array() ? std::vector<Json>(t.begin(), t.end())
                                             : std::vector<Json>{t};
      for (const Json& name : names) {
        if (!name.is_string() || kNames.count(name.get<std::string>()) == 0) {
          return Error(path, "'type' must be object, array, string, number, integer, boolean, "
                             "null or a list of them");
        }
        types.insert(name.get<std::string>());
      }
      if (types.count("integer") != 0 && types.count("number") != 0) types.erase("integer");
      if (types.empty()) return Error(path, "'type' must not be an empty list");
      return types;
    }
    if (Has(s, "properties") || Has(s, "required") || Has(s, "additionalProperties")) {
      types.insert("object");
    }
    if (Has(s, "items") || Has(s, "minItems") || Has(s, "maxItems")) types.insert("array");
    if (Has(s, "minLength") || Has(s, "maxLength") || Has(s, "pattern") || Has(s, "format")) {
      types.insert("string");
    }
    return types;  // empty: any value (or, with enum or const, any of those)
  }

  static absl::StatusOr<uint32_t> Count(const Json& s, const char* key, uint32_t absent,
                                        const std::string& path) {
    if (!Has(s, key)) return absent;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(path, absl::StrCat("'", key, "' must be a non-negative integer"));
    }
    return static_cast<uint32_t>(
        std::min<uint64_t>(v.get<uint64_t>(), kJsonUnbounded - 1));
  }

  absl::StatusOr<int32_t> CompileType(const Json& s, const std::string& type,
                                      const std::string& path, int depth) {
    JsonNode n;
    if (type == "boolean" || type == "null") {
      n.kind = JsonNode::Kind::kLiteral;
      n.literals = type == "null" ? std::vector<std::string>{"null"}
                                  : std::vector<std::string>{"true", "false"};
    } else if (type == "number" || type == "integer") {
      n.kind = JsonNode::Kind::kNumber;
      n.integer = type == "integer";
    } else if (type == "string") {
      n.kind = JsonNode::Kind::kString;
      absl::StatusOr<uint32_t> min = Count(s, "minLength", 0, path);
      absl::StatusOr<uint32_t> max = Count(s, "maxLength", kJsonUnbounded, path);
      if (!min.ok()) return min.status();
      if (!max.ok()) return max.status();
      if (*max < *min) return Error(path, "'maxLength' is below 'minLength'");
      n.min_length = *min;
      n.max_length = *max;
      absl::StatusOr<int32_t> pattern = StringPattern(s, path);
      if (!pattern.ok()) return pattern.status();
      n.pattern = *pattern;
    } else if (type == "array") {
      n.kind = JsonNode::Kind::kArray;
      absl::StatusOr<uint32_t> min = Count(s, "minItems", 0, path);
      absl::StatusOr<uint32_t> max = Count(s, "maxItems", kJsonUnbounded, path);
      if (!min.ok()) return min.status();
      if (!max.ok()) return max.status();
      if (*max < *min) return Error(path, "'maxItems' is below 'minItems'");
      n.min_items = *min;
      n.max_items = *max;
      if (Has(s, "items") && s["items"].is_array()) {
        return Error(path, "'items' as a list (tuples) is not supported");
      }
      if (Has(s, "items") && s["items"].is_boolean() && !s["items"].get<bool>()) {
        if (n.min_items > 0) return Error(path, "'items' false with 'minItems' above 0");
        n.max_items = 0;
      } else {
        absl::StatusOr<int32_t> items =
            Has(s, "items") ? Compile(s["items"], absl::StrCat(path, "/items"), depth + 1)
                            : absl::StatusOr<int32_t>(AnyNode());
        if (!items.ok()) return items.status();
        n.items = *items;
      }
    } else {
      absl::Status status = FillObject(s, path, depth, n);
      if (!status.ok()) return status;
    }
    return NewNode(std::move(n), path);
  }

  // The DFA of a string's pattern (searched, as ECMA-262's) or format (whole), or -1.
  absl::StatusOr<int32_t> StringPattern(const Json& s, const std::string& path) {
    if (!Has(s, "pattern") && !Has(s, "format")) return -1;
    if (Has(s, "pattern") && Has(s, "format")) {
      return Error(path, "'pattern' beside 'format' is not supported");
    }
    if (Has(s, "minLength") || Has(s, "maxLength")) {
      return Error(path, absl::StrCat("'", Has(s, "pattern") ? "pattern" : "format",
                                      "' beside minLength or maxLength is not supported"));
    }
    const char* keyword = Has(s, "pattern") ? "pattern" : "format";
    if (!s[keyword].is_string()) return Error(path, absl::StrCat("'", keyword, "' must be a string"));
    const std::string value = s[keyword].get<std::string>();
    std::string regex = value;
    if (Has(s, "format")) {
      const char* format = FormatRegex(value);
      if (format == nullptr) {
        return Error(path, absl::StrCat("format '", value.substr(0, 32),
                                        "' is not supported (date, time, date-time, uuid, "
                                        "ipv4, email, hostname are)"));
      }
      regex = format;
    }
    // A pattern (or format) the schema repeats is compiled once and shared.
    const bool search = Has(s, "pattern");
    const auto [known, added] =
        pattern_ids_.emplace(std::make_pair(regex, search),
                             static_cast<int32_t>(grammar_.patterns.size()));
    if (!added) return known->second;
    // One work budget for all of the schema's patterns: each within it costs a fraction of a
    // second to compile, and hundreds of them (a few KB of schema) would otherwise cost minutes
    // of a server thread per request.
    absl::StatusOr<RegexDfa> dfa = CompileRegexDfa(regex, search, &pattern_work_left_);
    if (!dfa.ok()) {
      pattern_ids_.erase(known);
      return Error(path, absl::StrCat("'", keyword, "': ", dfa.status().message()));
    }
    dfa_entries_ += dfa->next.size();
    if (dfa_entries_ > kMaxPatternEntries) {
      return Error(path, "the schema's patterns are too large together");
    }
    grammar_.patterns.push_back(*std::move(dfa));
    return known->second;
  }

  // Formats as regular expressions of the RFCs' forms (RFC 3339 dates and times, RFC 4122
  // UUIDs, dotted-quad IPv4, a common subset of RFC 5321 addresses, RFC 1123 host names): every
  // text they match is valid, though not every valid text is matched. Null for others.
  static const char* FormatRegex(const std::string& format) {
    static const auto* kFormats = new std::map<std::string, std::string>{
        // Days that exist in every year (February 29 is left out).
        {"date", R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))"},
        {"time", R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
        {"date-time",
         R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
        {"uuid",
         R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
        {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
        // A dot-atom local part and at most four labels: within RFC 5321's lengths.
        {"email", R"([A-Za-z0-9_%+\-]{1,16}(\.[A-Za-z0-9_%+\-]{1,16}){0,3}@[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?){0,2}\.[A-Za-z]{2,24})"},
        // At most three labels: within RFC 1123's 253 characters.
        {"hostname", R"([A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?){0,2})"},
    };
    auto it = kFormats->find(format);
    return it == kFormats->end() ? nullptr : it->second.c_str();
  }

  absl::Status FillObject(const Json& s, const std::string& path, int depth, JsonNode& n) {
    n.kind = JsonNode::Kind::kObject;
    std::set<std::string> required;
    if (Has(s, "required")) {
      const Json& r = s["required"];
      if (!r.is_array()) return Error(path, "'required' must be a list of property names");
      for (const Json& name : r) {
        if (!name.is_string()) return Error(path, "'required' must be a list of property names");
        required.insert(name.get<std::string>());
      }
    }
    const bool has_properties = Has(s, "properties");
    if (has_properties && !s["properties"].is_object()) {
      return Error(path, "'properties' must be an object");
    }
    if (has_properties && !s["properties"].empty()) {
      for (const auto& item : s["properties"].items()) {
        const std::string key = Json(item.key()).dump();
        if (key.size() > kMaxJsonLiteralBytes) {
          return Error(path, "a property name is longer than 1024 bytes");
        }
        absl::StatusOr<int32_t> value = Compile(
            item.value(), absl::StrCat(path, "/properties/", item.key().substr(0, 64)),
            depth + 1);
        if (!value.ok()) return value.status();
        n.keys.push_back(key);
        n.values.push_back(*value);
      }
      std::vector<bool> is_required;
      for (const auto& item : s["properties"].items()) {
        is_required.push_back(required.erase(item.key()) != 0);
      }
      n.next_required.assign(n.keys.size() + 1, static_cast<uint32_t>(n.keys.size()));
      for (size_t i = n.keys.size(); i-- > 0;) {
        n.next_required[i] = is_required[i] ? static_cast<uint32_t>(i) : n.next_required[i + 1];
      }
    } else {
      n.next_required = {0};
      const Json* extra = Has(s, "additionalProperties") ? &s["additionalProperties"] : nullptr;
      if (extra == nullptr || (extra->is_boolean() && extra->get<bool>())) {
        n.additional = AnyNode();
      } else if (!extra->is_boolean()) {
        absl::StatusOr<int32_t> value =
            Compile(*extra, absl::StrCat(path, "/additionalProperties"), depth + 1);
        if (!value.ok()) return value.status();
        n.additional = *value;
      }
    }
    if (!required.empty()) {
      return Error(path, absl::StrCat("'required' names '", required.begin()->substr(0, 64),
                                      "', which is not in 'properties'"));
    }
    return absl::OkStatus();
  }

  static bool LiteralHasType(const Json& v, const std::set<std::string>& types) {
    if (types.empty()) return true;
    auto has = [&](const char* t) { return types.count(t) != 0; };
    switch (v.type()) {
      case Json::value_t::object: return has("object");
      case Json::value_t::array: return has("array");
      case Json::value_t::string: return has("string");
      case Json::value_t::boolean: return has("boolean");
      case Json::value_t::null: return has("null");
      case Json::value_t::number_integer:
      case Json::value_t::number_unsigned: return has("number") || has("integer");
      case Json::value_t::number_float: {
        const double d = v.get<double>();
        return has("number") || (has("integer") && std::isfinite(d) && std::trunc(d) == d);
      }
      default: return false;
    }
  }

  absl::StatusOr<int32_t> CompileLiterals(const Json& s, const std::set<std::string>& types,
                                          const std::string& path) {
    std::vector<Json> values;
    if (Has(s, "const")) values.push_back(s["const"]);
    if (Has(s, "enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) {
        return Error(path, "'enum' must be a non-empty list");
      }
      if (s["enum"].size() > kMaxJsonEnumValues) {
        return Error(path, absl::StrCat("'enum' has more than ", kMaxJsonEnumValues, " values"));
      }
      for (const Json& v : s["enum"]) {
        if (!Has(s, "const") || v == s["const"]) values.push_back(v);
      }
      if (Has(s, "const")) values.erase(values.begin());
    }
    const bool typed = Has(s, "type");
    JsonNode n;
    n.kind = JsonNode::Kind::kLiteral;
    for (const Json& v : values) {
      if (typed && !LiteralHasType(v, types)) continue;
      std::string text = v.dump();
      if (text.size() > kMaxJsonLiteralBytes) {
        return Error(path, "an enum or const value is longer than 1024 bytes as JSON");
      }
      n.literals.push_back(std::move(text));
    }
    if (n.literals.empty()) return Error(path, "no enum or const value has the schema's type");
    return NewNode(std::move(n), path);
  }

  const Json& root_;
  JsonGrammar grammar_;
  std::vector<OneOfUse> one_of_;
  size_t dfa_entries_ = 0;
  size_t pattern_work_left_ = kMaxRegexDfaWork;                      // CompileRegexDfa's budget
  std::map<std::pair<std::string, bool>, int32_t> pattern_ids_;      // (regex, search) -> pattern
  absl::flat_hash_map<std::string, int32_t> refs_;
  int32_t any_ = -1;
};

}  // namespace

absl::StatusOr<JsonGrammar> CompileJsonSchema(absl::string_view schema_json,
                                              JsonGrammarOptions options) {
  if (schema_json.size() > kMaxJsonSchemaBytes) {
    return absl::InvalidArgumentError(absl::StrCat("json schema: longer than ",
                                                   kMaxJsonSchemaBytes, " bytes"));
  }
  // nlohmann's parser is iterative, but copies, comparisons and dump() of a value recurse:
  // nesting is bounded first (the gateway bounds request bodies the same way).
  if (!JsonNestingWithin(schema_json, kMaxSchemaNesting)) {
    return absl::InvalidArgumentError(
        absl::StrCat("json schema: nested deeper than ", kMaxSchemaNesting, " levels"));
  }
  Json schema = Json::parse(schema_json.begin(), schema_json.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("json schema: not valid JSON");
  Compiler compiler(schema);
  absl::StatusOr<int32_t> root = compiler.Compile(schema, "", 0);
  if (!root.ok()) return root.status();
  std::vector<OneOfUse> one_of = std::move(compiler).TakeOneOfs();
  JsonGrammar grammar = std::move(compiler).Take();
  JsonGrammarAnalysis analysis(grammar, std::move(one_of));
  if (absl::Status status = analysis.CheckNoEmptyCycles(); !status.ok()) return status;
  if (absl::Status status = analysis.FlattenUnions(); !status.ok()) return status;
  if (absl::Status status = analysis.ComputeMinDepths(*root); !status.ok()) return status;
  if (absl::Status status = analysis.CheckOneOfsAreDisjoint(); !status.ok()) return status;
  grammar.root = *root;
  grammar.max_whitespace = options.allow_whitespace ? kMaxJsonWhitespace : 0;
  return grammar;
}

}  // namespace blossom
