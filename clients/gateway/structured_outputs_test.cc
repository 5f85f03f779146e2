#include "clients/gateway/structured_outputs.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

blossom::v1::SamplingParameters Parse(const char* body, absl::Status* status = nullptr) {
  blossom::v1::SamplingParameters sampling;
  absl::Status s = ParseStructuredOutputs(Json::parse(body), body, &sampling);
  if (status != nullptr) *status = s;
  else EXPECT_TRUE(s.ok()) << body << ": " << s;
  return sampling;
}

// The field a refusal names, and that it is a 400-class INVALID_ARGUMENT.
std::string Refused(const char* body) {
  absl::Status status;
  Parse(body, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << body;
  return ParamOf(status);
}

TEST(StructuredOutputsTest, ResponseFormats) {
  EXPECT_FALSE(Parse(R"({"response_format": {"type": "text"}})").has_json_schema());
  EXPECT_EQ(Parse(R"({"response_format": {"type": "json_object"}})").json_schema(),
            R"({"type":"object"})");
  const auto schema = Parse(R"({"response_format": {"type": "json_schema", "json_schema":
      {"name": "person", "strict": true, "schema": {"type": "object", "properties":
      {"name": {"type": "string"}}}}}})");
  EXPECT_EQ(Json::parse(schema.json_schema()),
            Json::parse(R"({"type": "object", "properties": {"name": {"type": "string"}}})"));
  EXPECT_FALSE(schema.json_compact());
  EXPECT_EQ(Parse(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})")
                .json_schema(),
            "{}");
  EXPECT_EQ(Parse(R"({"response_format": {"type": "json", "value": {"type": "array"}}})")
                .json_schema(),
            R"({"type":"array"})");
  EXPECT_EQ(Refused(R"({"response_format": {"type": "yaml"}})"), "response_format.type");
  EXPECT_EQ(Refused(R"({"response_format": {"type": "json_schema"}})"),
            "response_format.json_schema");
  EXPECT_EQ(Refused(R"({"response_format": "json"})"), "response_format");
}

TEST(StructuredOutputsTest, SchemasKeepTheBodysKeyOrder) {
  // Json would sort "zeta" after "alpha"; the output follows the schema's order.
  const char* body = R"({"guided_json": {"properties": {"zeta": {}, "alpha": {"type": "string"}},
                          "type": "object"}})";
  EXPECT_EQ(Parse(body).json_schema(),
            R"({"properties":{"zeta":{},"alpha":{"type":"string"}},"type":"object"})");
  const char* tgi = R"({"grammar": {"type": "json", "value": {"b": 1, "a": 2}}})";
  absl::Status status;
  blossom::v1::SamplingParameters sampling;
  status = ParseTgiGrammar(Json::parse(tgi), absl::StrCat(R"({"parameters": )", tgi, "}"),
                           &sampling);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(sampling.json_schema(), R"({"b":1,"a":2})");
}

TEST(StructuredOutputsTest, VllmFields) {
  EXPECT_EQ(Parse(R"({"guided_json": {"type": "integer"}})").json_schema(), R"({"type":"integer"})");
  EXPECT_EQ(Parse(R"({"guided_json": "{\"type\": \"integer\"}"})").json_schema(),
            R"({"type": "integer"})");
  const auto choice = Parse(R"({"guided_choice": ["yes", "no"], "guided_decoding_backend": "xgrammar"})");
  ASSERT_EQ(choice.guided_choice_size(), 2);
  EXPECT_EQ(choice.guided_choice(1), "no");
  const auto compact = Parse(R"({"structured_outputs": {"json": {"type": "object"},
      "disable_any_whitespace": true, "disable_fallback": false,
      "disable_additional_properties": true}})");
  EXPECT_EQ(compact.json_schema(), R"({"type":"object"})");
  EXPECT_TRUE(compact.json_compact());
  EXPECT_EQ(Parse(R"({"structured_outputs": {"json_object": true}})").json_schema(),
            R"({"type":"object"})");
  EXPECT_EQ(Parse(R"({"guided_regex": "[0-9]+"})").regex(), "[0-9]+");
  EXPECT_EQ(Parse(R"({"structured_outputs": {"regex": "a|b"}})").regex(), "a|b");
  EXPECT_EQ(Parse(R"({"guided_grammar": "root ::= [0-9]+"})").grammar(), "root ::= [0-9]+");
  // llama.cpp's server's spellings.
  EXPECT_EQ(Parse(R"({"grammar": "root ::= [a-z]+"})").grammar(), "root ::= [a-z]+");
  EXPECT_EQ(Parse(R"({"json_schema": {"type": "array"}})").json_schema(), R"({"type":"array"})");
  EXPECT_EQ(Parse(R"({"structured_outputs": {"grammar": "root ::= \"a\""}})").grammar(),
            "root ::= \"a\"");
  // TGI's chat spelling of a schema.
  EXPECT_EQ(Parse(R"({"response_format": {"type": "json_object", "value": {"type": "array"}}})")
                .json_schema(),
            R"({"type":"array"})");
  // Option flags beside a choice are accepted (vLLM's clients send their defaults).
  EXPECT_EQ(Parse(R"({"structured_outputs": {"choice": ["a"], "disable_any_whitespace": false}})")
                .guided_choice_size(),
            1);
}

TEST(StructuredOutputsTest, RefusalsNameTheField) {
  EXPECT_EQ(Refused(R"({"guided_regex": ""})"), "guided_regex");
  EXPECT_EQ(Refused(R"({"guided_regex": ["a"]})"), "guided_regex");
  EXPECT_EQ(Refused(R"({"guided_grammar": ""})"), "guided_grammar");
  EXPECT_EQ(Refused(R"({"guided_grammar": {"root": "x"}})"), "guided_grammar");
  EXPECT_EQ(Refused(R"({"guided_whitespace_pattern": " *"})"), "guided_whitespace_pattern");
  EXPECT_EQ(Refused(R"({"structured_outputs": {"regex": 3}})"), "structured_outputs.regex");
  EXPECT_EQ(Refused(R"({"structured_outputs": {"grammar": 3}})"), "structured_outputs.grammar");
  EXPECT_EQ(Refused(R"({"guided_grammar": "root ::= x", "guided_regex": "x"})"),
            "guided_grammar");
  EXPECT_EQ(Refused(R"({"grammar": "root ::= x", "guided_grammar": "root ::= y"})"), "grammar");
  EXPECT_EQ(Refused(R"({"json_schema": 5})"), "json_schema");
  EXPECT_EQ(Refused(R"({"structured_outputs": {"whitespace_pattern": " "}})"),
            "structured_outputs.whitespace_pattern");
  EXPECT_EQ(Refused(R"({"structured_outputs": {"disable_any_whitespace": 1}})"),
            "structured_outputs.disable_any_whitespace");
  EXPECT_EQ(Refused(R"({"guided_json": 3})"), "guided_json");
  EXPECT_EQ(Refused(R"({"guided_json": ""})"), "guided_json");
  EXPECT_EQ(Refused(R"({"guided_choice": []})"), "guided_choice");
  EXPECT_EQ(Refused(R"({"guided_choice": ["a", ""]})"), "guided_choice");
  // Two constraints: the second is refused, naming the first.
  absl::Status status;
  Parse(R"({"guided_choice": ["a"], "response_format": {"type": "json_object"}})", &status);
  EXPECT_EQ(ParamOf(status), "response_format");
  EXPECT_NE(status.message().find("guided_choice is already given"), absl::string_view::npos);
  EXPECT_EQ(Refused(R"({"guided_json": {}, "structured_outputs": {"json": {}}})"),
            "structured_outputs.json");
  const std::string huge = R"({"guided_json": ")" + std::string(kMaxJsonSchemaBytes + 1, ' ') + "\"}";
  EXPECT_EQ(Refused(huge.c_str()), "guided_json");
  const std::string long_grammar =
      R"({"guided_grammar": ")" + std::string(kMaxGrammarBytes + 1, ' ') + "\"}";
  EXPECT_EQ(Refused(long_grammar.c_str()), "guided_grammar");
}

TEST(TgiGrammarTest, JsonJsonSchemaAndRegex) {
  auto parse = [](const char* parameters, absl::Status* status) {
    blossom::v1::SamplingParameters sampling;
    const std::string body = absl::StrCat(R"({"parameters": )", parameters, "}");
    *status = ParseTgiGrammar(Json::parse(parameters), body, &sampling);
    return sampling;
  };
  absl::Status status;
  EXPECT_EQ(parse(R"({"grammar": {"type": "json", "value": {"type": "object"}}})", &status)
                .json_schema(),
            R"({"type":"object"})");
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(parse(R"({"grammar": {"type": "json_schema", "value": {"name": "n", "schema": true}}})",
                  &status)
                .json_schema(),
            "true");
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(parse(R"({"grammar": null})", &status).has_json_schema());
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(parse(R"({"grammar": {"type": "regex", "value": "a+"}})", &status).regex(), "a+");
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(parse(R"({"grammar": {"type": "json_object", "value": {"type": "object"}}})", &status)
                .json_schema(),
            R"({"type":"object"})");
  EXPECT_TRUE(status.ok()) << status;
  parse(R"({"grammar": {"type": "regex", "value": ""}})", &status);
  EXPECT_EQ(ParamOf(status), "parameters.grammar.value");
  parse(R"({"grammar": {"type": "json"}})", &status);
  EXPECT_EQ(ParamOf(status), "parameters.grammar.value");
  parse(R"({"grammar": {"type": "ebnf", "value": "x"}})", &status);
  EXPECT_EQ(ParamOf(status), "parameters.grammar.type");
}

}  // namespace
}  // namespace blossom::gateway
