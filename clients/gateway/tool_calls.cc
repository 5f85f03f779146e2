#include "clients/gateway/tool_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace blossom::gateway {
namespace {

using Ordered = nlohmann::ordered_json;

constexpr size_t kMaxFunctionName = 64;
// The server's limit on a json_schema (engine/guided/json_grammar.h).
constexpr size_t kMaxToolSchemaBytes = 64 * 1024;

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxFunctionName) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string Compact(const Ordered& value) {
  return value.dump(-1, ' ', false, Ordered::error_handler_t::replace);
}

// Rewrites a tool's local references ("#", "#/$defs/x", "#/definitions/x") to `prefix` names
// in the combined schema's $defs ("<prefix>", "<prefix>_defs_x", "<prefix>_definitions_x"), so
// that several tools' parameters can sit in one schema. Values that are data, not schemas
// (const, enum, default, examples), are left alone. `names`: the object's keys are names whose
// values are all schemas (the inside of properties or $defs, where a property may well be
// called "default" or "$ref"). Returns whether a "#" was rewritten (the tool's root is then
// needed under $defs).
bool Relocate(Ordered& value, const std::string& prefix, bool names = false) {
  bool root = false;
  if (value.is_object()) {
    for (auto& [key, inner] : value.items()) {
      if (names) {
        root |= Relocate(inner, prefix);
        continue;
      }
      if (key == "const" || key == "enum" || key == "default" || key == "examples") continue;
      if (key == "$ref" && inner.is_string()) {
        const std::string ref = inner.get<std::string>();
        if (ref == "#") {
          inner = absl::StrCat("#/$defs/", prefix);
          root = true;
        }
        for (const char* section : {"$defs", "definitions"}) {
          const std::string s = absl::StrCat("#/", section, "/");
          if (ref.compare(0, s.size(), s) == 0) {
            inner = absl::StrCat("#/$defs/", prefix, "_", section[0] == '$' ? "defs" : section,
                                 "_", ref.substr(s.size()));
          }
        }
      } else {
        root |= Relocate(inner, prefix,
                         key == "properties" || key == "$defs" || key == "definitions" ||
                             key == "patternProperties" || key == "dependentSchemas");
      }
    }
  } else if (value.is_array()) {
    for (Ordered& inner : value) root |= Relocate(inner, prefix);
  }
  return root;
}

// OpenAI's arguments are an object: parameters left empty are one with any properties (as
// vLLM reads them), and a schema typed as something else is refused.
absl::StatusOr<Ordered> ObjectParameters(const Ordered& spec, const std::string& where) {
  if (!spec.contains("parameters") || spec["parameters"].is_null()) {
    // No parameters: a call with none, as OpenAI reads an omitted schema.
    return Ordered{{"type", "object"}, {"additionalProperties", false}};
  }
  const Ordered& p = spec["parameters"];
  if (p.empty()) return Ordered{{"type", "object"}};
  if (p.contains("type")) {
    const Ordered& type = p["type"];
    const bool object = type == "object" ||
                        (type.is_array() && std::find(type.begin(), type.end(), "object") != type.end());
    if (!object) return FieldError(where + ".function.parameters", "must describe an object");
  }
  return p;
}

}  // namespace

absl::StatusOr<ParsedTools> ParseTools(const Json& body, absl::string_view raw_body) {
  ParsedTools out;
  if (auto it = body.find("functions"); it != body.end() && !it->is_null()) {
    return FieldError("functions", "is not supported (the deprecated form of tools)");
  }
  auto tools_it = body.find("tools");
  const bool has_tools = tools_it != body.end() && !tools_it->is_null() &&
                         !(tools_it->is_array() && tools_it->empty());
  auto choice_it = body.find("tool_choice");
  const Json choice = choice_it == body.end() ? Json() : *choice_it;
  if (!has_tools) {
    if (!choice.is_null() && choice != "none") {
      return FieldError("tool_choice", "needs tools");
    }
    return out;
  }
  if (!tools_it->is_array()) return FieldError("tools", "must be a list of tools");
  if (tools_it->size() > kMaxTools) {
    return FieldError("tools", absl::StrCat("at most ", kMaxTools, " tools"));
  }
  // The same body in key order, for the specs and their parameters' schemas.
  const Ordered ordered = Ordered::parse(raw_body.begin(), raw_body.end(), nullptr, false);
  std::vector<std::string> names;
  std::vector<Ordered> specs, parameters;
  for (size_t i = 0; i < tools_it->size(); ++i) {
    const Json& tool = (*tools_it)[i];
    const std::string where = absl::StrCat("tools[", i, "]");
    if (!tool.is_object() || tool.value("type", Json()) != "function") {
      return FieldError(where + ".type", "must be \"function\"");
    }
    auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) {
      return FieldError(where + ".function", "must be an object");
    }
    auto name = function->find("name");
    if (name == function->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
      return FieldError(where + ".function.name",
                        "must be 1-64 characters of a-z, A-Z, 0-9, _ and -");
    }
    for (const std::string& seen : names) {
      if (seen == name->get<std::string>()) {
        return FieldError(where + ".function.name", "names another tool's function again");
      }
    }
    names.push_back(name->get<std::string>());
    auto params = function->find("parameters");
    if (params != function->end() && !params->is_null() && !params->is_object()) {
      return FieldError(where + ".function.parameters", "must be a JSON Schema object");
    }
    const Ordered& spec = ordered["tools"][i]["function"];
    specs.push_back(spec);
    absl::StatusOr<Ordered> p = ObjectParameters(spec, where);
    if (!p.ok()) return p.status();
    parameters.push_back(*std::move(p));
  }
  if (choice.is_null() || choice == "auto") {
    return FieldError("tool_choice",
                      "\"auto\" (the default with tools) needs a parser of the model's own "
                      "tool-call format, which BLOOM models have none of: use \"required\", name "
                      "a function, or \"none\"");
  }
  if (choice == "none") return out;
  if (choice == "required") {
    out.choice.mode = ToolChoice::Mode::kRequired;
    // [{"name": <one of the tools>, "parameters": <its schema>}, ...], each tool's references
    // moved under the combined schema's $defs.
    Ordered alternatives = Ordered::array();
    Ordered defs = Ordered::object();
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string prefix = absl::StrCat("tool", i);
      Ordered p = parameters[i];
      bool root = false;
      for (const char* section : {"$defs", "definitions"}) {
        if (!p.is_object() || !p.contains(section) || !p[section].is_object()) continue;
        for (auto& [key, def] : p[section].items()) {
          Ordered moved = def;
          root |= Relocate(moved, prefix);
          defs[absl::StrCat(prefix, "_", section[0] == '$' ? "defs" : section, "_", key)] =
              std::move(moved);
        }
        p.erase(section);
      }
      root |= Relocate(p, prefix);
      if (root) defs[prefix] = p;  // what "#" inside it referred to
      alternatives.push_back(Ordered{
          {"type", "object"},
          {"properties", Ordered{{"name", Ordered{{"const", names[i]}}}, {"parameters", p}}},
          {"required", Ordered::array({"name", "parameters"})}});
    }
    Ordered schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", alternatives}}}};
    if (!defs.empty()) schema["$defs"] = std::move(defs);
    out.schema = Compact(schema);
    out.param = "tools";
    if (out.schema.size() > kMaxToolSchemaBytes) {
      return FieldError("tools", absl::StrCat("the tools' parameters make a schema of more than ",
                                              kMaxToolSchemaBytes, " bytes for \"required\""));
    }
  } else {
    if (!choice.is_object() || choice.value("type", Json()) != "function" ||
        !choice.contains("function") || !choice["function"].is_object() ||
        !choice["function"].contains("name") || !choice["function"]["name"].is_string()) {
      return FieldError("tool_choice",
                        "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
    }
    const std::string wanted = choice["function"]["name"].get<std::string>();
    size_t index = names.size();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == wanted) index = i;
    }
    if (index == names.size()) {
      return FieldError("tool_choice", "names a function that is not in tools");
    }
    out.choice.mode = ToolChoice::Mode::kNamed;
    out.choice.function = wanted;
    out.schema = Compact(parameters[index]);
    out.param = absl::StrCat("tools[", index, "].function.parameters");
    if (out.schema.size() > kMaxToolSchemaBytes) {
      return FieldError(absl::StrCat("tools[", index, "].function.parameters"),
                        absl::StrCat("more than ", kMaxToolSchemaBytes, " bytes"));
    }
  }
  for (const Ordered& spec : specs) out.rendered.push_back(Compact(spec));
  return out;
}

absl::optional<Json> ToolCallsJson(const ToolChoice& choice, absl::string_view text,
                                   absl::string_view id_prefix) {
  const Ordered parsed = Ordered::parse(text.begin(), text.end(), nullptr, false);
  if (parsed.is_discarded()) return absl::nullopt;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  if (choice.mode == ToolChoice::Mode::kNamed) {
    // The text as generated (as vLLM returns it, and as it streams): re-serializing would
    // rewrite its numbers and spacing.
    calls.emplace_back(choice.function, std::string(text));
  } else if (choice.mode == ToolChoice::Mode::kRequired) {
    if (!parsed.is_array()) return absl::nullopt;
    for (const Ordered& call : parsed) {
      if (!call.is_object() || !call.contains("name") || !call["name"].is_string() ||
          !call.contains("parameters")) {
        return absl::nullopt;
      }
      calls.emplace_back(call["name"].get<std::string>(), Compact(call["parameters"]));
    }
  } else {
    return absl::nullopt;
  }
  Json out = Json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    out.push_back({{"id", absl::StrCat("call_", id_prefix, "_", k)},
                   {"type", "function"},
                   {"function", {{"name", calls[k].first}, {"arguments", calls[k].second}}}});
  }
  return out;
}

}  // namespace blossom::gateway
