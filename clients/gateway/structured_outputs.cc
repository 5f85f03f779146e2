#include "clients/gateway/structured_outputs.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace blossom::gateway {
namespace {

absl::Status Unsupported(absl::string_view field, absl::string_view what) {
  return FieldError(field, absl::StrCat(what, " is not supported"));
}

// One constraint, from whichever field gave it.
struct Constraint {
  std::string field;                // the client's name for it, for errors
  std::vector<std::string> choices;  // guided choice
  std::string schema;               // JSON Schema text; empty: none
  std::string regex;                // a pattern the whole output matches; empty: none
  std::string grammar;              // a GBNF grammar the whole output is a root of; empty: none
};

// A regex given as a non-empty string of at most kMaxRegexBytes.
absl::Status RegexText(const Json& value, const std::string& field, std::string* out) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    return FieldError(field, "must be a non-empty string (a regular expression)");
  }
  *out = value.get<std::string>();
  if (out->size() > kMaxRegexBytes) {
    return FieldError(field, absl::StrCat("longer than ", kMaxRegexBytes, " bytes"));
  }
  return absl::OkStatus();
}

// A grammar given as a non-empty string of at most kMaxGrammarBytes.
absl::Status GrammarText(const Json& value, const std::string& field, std::string* out) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    return FieldError(field, "must be a non-empty string (a grammar in GBNF)");
  }
  *out = value.get<std::string>();
  if (out->size() > kMaxGrammarBytes) {
    return FieldError(field, absl::StrCat("longer than ", kMaxGrammarBytes, " bytes"));
  }
  return absl::OkStatus();
}

// The value at `path` in the body, as JSON text with its objects' keys in the body's order:
// Json sorts keys, and a schema's property order is the order the output follows.
std::string OrderedText(absl::string_view body, const std::vector<std::string>& path) {
  using Ordered = nlohmann::ordered_json;
  Ordered value = Ordered::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  for (const std::string& key : path) {
    if (!value.is_object() || !value.contains(key)) return "";
    Ordered inner = std::move(value[key]);
    value = std::move(inner);
  }
  return value.dump(-1, ' ', false, Ordered::error_handler_t::replace);
}

// A schema given as a JSON value (an object or a boolean) or as its text; `path` is where it
// is in `body`.
absl::Status SchemaText(const Json& value, const std::string& field, absl::string_view body,
                        const std::vector<std::string>& path, std::string* out) {
  if (value.is_string()) {
    *out = value.get<std::string>();
  } else if (value.is_object() || value.is_boolean()) {
    *out = OrderedText(body, path);
  } else {
    return FieldError(field, "must be a JSON Schema (an object, or its text)");
  }
  if (out->empty()) return FieldError(field, "must not be empty");
  if (out->size() > kMaxJsonSchemaBytes) {
    return FieldError(field, absl::StrCat("longer than ", kMaxJsonSchemaBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Choices(const Json& value, const std::string& field, Constraint* out) {
  if (!value.is_array() || value.empty()) {
    return FieldError(field, "must be a non-empty list of strings");
  }
  if (value.size() > kMaxGuidedChoices) {
    return FieldError(field, absl::StrCat("at most ", kMaxGuidedChoices, " choices"));
  }
  for (const Json& choice : value) {
    if (!choice.is_string() || choice.get_ref<const std::string&>().empty()) {
      return FieldError(field, "must be a non-empty list of non-empty strings");
    }
    out->choices.push_back(choice.get<std::string>());
  }
  return absl::OkStatus();
}

class Collector {
 public:
  // Records a constraint from `field`; a second one is refused.
  absl::Status Add(Constraint c) {
    if (!constraint_.field.empty()) {
      return FieldError(c.field, absl::StrCat("give one structured-output constraint: ",
                                              constraint_.field, " is already given"));
    }
    constraint_ = std::move(c);
    return absl::OkStatus();
  }
  const std::string& field() const { return constraint_.field; }
  void Fill(bool compact, blossom::v1::SamplingParameters* sampling) const {
    for (const std::string& choice : constraint_.choices) sampling->add_guided_choice(choice);
    if (!constraint_.schema.empty()) {
      sampling->set_json_schema(constraint_.schema);
      sampling->set_json_compact(compact);
    }
    if (!constraint_.regex.empty()) sampling->set_regex(constraint_.regex);
    if (!constraint_.grammar.empty()) sampling->set_grammar(constraint_.grammar);
  }

 private:
  Constraint constraint_;
};

absl::Status ParseStructuredOutputsObject(const Json& so, absl::string_view body,
                                          Collector& collector, bool* compact) {
  if (!so.is_object()) return FieldError("structured_outputs", "must be an object");
  for (const auto& [key, value] : so.items()) {
    if (value.is_null()) continue;
    const std::string field = absl::StrCat("structured_outputs.", key.substr(0, 32));
    if (key == "choice") {
      Constraint c{field, {}, {}};
      if (absl::Status s = Choices(value, field, &c); !s.ok()) return s;
      if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
    } else if (key == "json") {
      Constraint c{field, {}, {}};
      if (absl::Status s = SchemaText(value, field, body, {"structured_outputs", "json"}, &c.schema);
          !s.ok()) {
        return s;
      }
      if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
    } else if (key == "regex") {
      Constraint c{field, {}, {}, {}};
      if (absl::Status s = RegexText(value, field, &c.regex); !s.ok()) return s;
      if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
    } else if (key == "grammar") {
      Constraint c{field, {}, {}, {}, {}};
      if (absl::Status s = GrammarText(value, field, &c.grammar); !s.ok()) return s;
      if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
    } else if (key == "json_object") {
      if (!value.is_boolean()) return FieldError(field, "must be a boolean");
      if (!value.get<bool>()) continue;
      if (absl::Status s = collector.Add({field, {}, R"({"type":"object"})"}); !s.ok()) return s;
    } else if (key == "disable_any_whitespace") {
      if (!value.is_boolean()) return FieldError(field, "must be a boolean");
      *compact = value.get<bool>();
    } else if (key == "disable_fallback" || key == "disable_additional_properties") {
      // Nothing to do: there is no fallback backend, and no property outside a schema's
      // properties is ever generated.
      if (!value.is_boolean()) return FieldError(field, "must be a boolean");
    } else if (key == "backend") {
      if (!value.is_string()) return FieldError(field, "must be a string");
    } else {
      // structural_tag, whitespace_pattern and anything newer.
      return Unsupported(field, field);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseResponseFormat(const Json& format, absl::string_view body,
                                 Collector& collector) {
  const char* field = "response_format";
  if (!format.is_object()) return FieldError(field, "must be an object");
  const Json type = format.value("type", Json());
  if (type == "text") return absl::OkStatus();
  Constraint c{field, {}, {}};
  if (type == "json_object") {
    // TGI's chat spelling carries a schema in "value" (its GrammarType aliases json_object to
    // json); OpenAI's has none: any object.
    auto value = format.find("value");
    if (value == format.end() || value->is_null()) {
      return collector.Add({field, {}, R"({"type":"object"})"});
    }
    if (absl::Status s = SchemaText(*value, "response_format.value", body,
                                    {"response_format", "value"}, &c.schema);
        !s.ok()) {
      return s;
    }
    return collector.Add(std::move(c));
  }
  if (type == "json_schema") {
    auto spec = format.find("json_schema");
    if (spec == format.end() || !spec->is_object()) {
      return FieldError("response_format.json_schema", "must be an object");
    }
    auto schema = spec->find("schema");
    if (schema == spec->end() || schema->is_null()) {
      c.schema = "{}";
    } else if (absl::Status s = SchemaText(*schema, "response_format.json_schema.schema", body,
                                           {"response_format", "json_schema", "schema"},
                                           &c.schema);
               !s.ok()) {
      return s;
    }
    return collector.Add(std::move(c));
  }
  if (type == "json") {  // TGI's spelling: the schema is "value"
    auto value = format.find("value");
    if (value == format.end()) return FieldError("response_format.value", "is required");
    if (absl::Status s = SchemaText(*value, "response_format.value", body,
                                    {"response_format", "value"}, &c.schema);
        !s.ok()) {
      return s;
    }
    return collector.Add(std::move(c));
  }
  return FieldError("response_format.type",
                    "must be \"text\", \"json_object\" or \"json_schema\"");
}

}  // namespace

absl::Status ParseStructuredOutputs(const Json& body, absl::string_view raw_body,
                                    blossom::v1::SamplingParameters* sampling, std::string* param) {
  Collector collector;
  bool compact = false;
  if (auto it = body.find("guided_whitespace_pattern"); it != body.end() && !it->is_null()) {
    return Unsupported("guided_whitespace_pattern", "guided_whitespace_pattern");
  }
  if (auto it = body.find("guided_decoding_backend"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return FieldError("guided_decoding_backend", "must be a string");
  }
  if (auto it = body.find("guided_choice"); it != body.end() && !it->is_null()) {
    Constraint c{"guided_choice", {}, {}};
    if (absl::Status s = Choices(*it, c.field, &c); !s.ok()) return s;
    if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
  }
  if (auto it = body.find("guided_regex"); it != body.end() && !it->is_null()) {
    Constraint c{"guided_regex", {}, {}, {}};
    if (absl::Status s = RegexText(*it, c.field, &c.regex); !s.ok()) return s;
    if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
  }
  // vLLM's guided_grammar, and llama.cpp's server's own spelling of the same GBNF.
  for (const char* field : {"guided_grammar", "grammar"}) {
    if (auto it = body.find(field); it != body.end() && !it->is_null()) {
      Constraint c{field, {}, {}, {}, {}};
      if (absl::Status s = GrammarText(*it, c.field, &c.grammar); !s.ok()) return s;
      if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
    }
  }
  // llama.cpp's server's json_schema (a schema object, or its text).
  if (auto it = body.find("json_schema"); it != body.end() && !it->is_null()) {
    Constraint c{"json_schema", {}, {}};
    if (absl::Status s = SchemaText(*it, c.field, raw_body, {"json_schema"}, &c.schema); !s.ok()) {
      return s;
    }
    if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
  }
  if (auto it = body.find("guided_json"); it != body.end() && !it->is_null()) {
    Constraint c{"guided_json", {}, {}};
    if (absl::Status s = SchemaText(*it, c.field, raw_body, {"guided_json"}, &c.schema); !s.ok()) {
      return s;
    }
    if (absl::Status s = collector.Add(std::move(c)); !s.ok()) return s;
  }
  if (auto it = body.find("structured_outputs"); it != body.end() && !it->is_null()) {
    if (absl::Status s = ParseStructuredOutputsObject(*it, raw_body, collector, &compact);
        !s.ok()) {
      return s;
    }
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (absl::Status s = ParseResponseFormat(*it, raw_body, collector); !s.ok()) return s;
  }
  collector.Fill(compact, sampling);
  if (param != nullptr) *param = collector.field();
  return absl::OkStatus();
}

absl::Status ParseTgiGrammar(const Json& parameters, absl::string_view raw_body,
                             blossom::v1::SamplingParameters* sampling) {
  auto it = parameters.find("grammar");
  if (it == parameters.end() || it->is_null()) return absl::OkStatus();
  const char* field = "parameters.grammar";
  if (!it->is_object()) return FieldError(field, "must be an object with \"type\" and \"value\"");
  const Json type = it->value("type", Json());
  auto value = it->find("value");
  if (value == it->end() || value->is_null()) {
    return FieldError("parameters.grammar.value", "is required");
  }
  std::string schema;
  if (type == "json" || type == "json_object") {  // TGI's alias
    if (absl::Status s = SchemaText(*value, "parameters.grammar.value", raw_body,
                                    {"parameters", "grammar", "value"}, &schema);
        !s.ok()) {
      return s;
    }
  } else if (type == "json_schema") {  // {"name": ..., "schema": ...}
    if (!value->is_object() || !value->contains("schema")) {
      return FieldError("parameters.grammar.value", "must be an object with \"schema\"");
    }
    if (absl::Status s = SchemaText((*value)["schema"], "parameters.grammar.value.schema",
                                    raw_body, {"parameters", "grammar", "value", "schema"},
                                    &schema);
        !s.ok()) {
      return s;
    }
  } else if (type == "regex") {
    std::string regex;
    if (absl::Status s = RegexText(*value, "parameters.grammar.value", &regex); !s.ok()) return s;
    sampling->set_regex(regex);
    return absl::OkStatus();
  } else {
    return FieldError("parameters.grammar.type",
                      "must be \"json\", \"json_object\", \"json_schema\" or \"regex\"");
  }
  sampling->set_json_schema(schema);
  return absl::OkStatus();
}

}  // namespace blossom::gateway
