#include "clients/gateway/tool_calls.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

constexpr const char* kWeather = R"({"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}})";
constexpr const char* kTime = R"({"type": "function", "function": {"name": "now"}})";

absl::StatusOr<ParsedTools> Parse(const std::string& body) {
  return ParseTools(Json::parse(body), body);
}

TEST(ToolCallsTest, NamedChoiceIsTheFunctionsParameters) {
  const std::string body = std::string(R"({"tools": [)") + kWeather + "," + kTime +
                           R"(], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})";
  auto parsed = Parse(body);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(parsed->choice.function, "get_weather");
  // The body's key order: city before unit.
  EXPECT_EQ(parsed->schema,
            R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]})");
  ASSERT_EQ(parsed->rendered.size(), 2u);
  EXPECT_EQ(parsed->rendered[1], R"({"name":"now"})");
  // A function without parameters takes none.
  auto now = Parse(std::string(R"({"tools": [)") + kTime +
                   R"(], "tool_choice": {"type": "function", "function": {"name": "now"}}})");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->schema, R"({"type":"object","additionalProperties":false})");
}

TEST(ToolCallsTest, RequiredChoiceIsAListOfCallsWithTheToolsDefsMoved) {
  const std::string tool = R"({"type": "function", "function": {"name": "tree",
      "parameters": {"$defs": {"N": {"type": "object", "properties": {"kids": {"type": "array",
      "items": {"$ref": "#/$defs/N"}}}}}, "$ref": "#/$defs/N"}}})";
  auto parsed = Parse(std::string(R"({"tools": [)") + kWeather + "," + tool +
                      R"(], "tool_choice": "required"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->choice.mode, ToolChoice::Mode::kRequired);
  const Json schema = Json::parse(parsed->schema);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["name"]["const"], "tree");
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"]["$ref"],
            "#/$defs/tool1_defs_N");
  EXPECT_EQ(schema["$defs"]["tool1_defs_N"]["properties"]["kids"]["items"]["$ref"],
            "#/$defs/tool1_defs_N");
  // Only what "#" named is copied; the weather tool's parameters are not duplicated.
  EXPECT_FALSE(schema["$defs"].contains("tool0"));
  EXPECT_FALSE(schema["$defs"].contains("tool1"));
}

TEST(ToolCallsTest, RequiredKeepsSectionsApartAndDataUntouched) {
  const std::string tool = R"({"type": "function", "function": {"name": "t", "parameters": {
      "type": "object", "$defs": {"T": {"type": "string"}}, "definitions": {"T": {"type": "integer"}},
      "properties": {"a": {"$ref": "#/$defs/T"}, "b": {"$ref": "#/definitions/T"},
      "c": {"const": {"$ref": "#"}}, "d": {"$ref": "#"}, "default": {"$ref": "#/$defs/T"},
      "enum": {"type": "array", "items": {"$ref": "#/definitions/T"}}}}}})";
  auto parsed = Parse(std::string(R"({"tools": [)") + tool + R"(], "tool_choice": "required"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Json schema = Json::parse(parsed->schema);
  const Json& p = schema["items"]["anyOf"][0]["properties"]["parameters"]["properties"];
  EXPECT_EQ(p["a"]["$ref"], "#/$defs/tool0_defs_T");
  EXPECT_EQ(p["b"]["$ref"], "#/$defs/tool0_definitions_T");
  EXPECT_EQ(p["c"]["const"]["$ref"], "#") << "a const is data";
  EXPECT_EQ(p["d"]["$ref"], "#/$defs/tool0");
  // Properties named after data keywords are schemas like any other.
  EXPECT_EQ(p["default"]["$ref"], "#/$defs/tool0_defs_T");
  EXPECT_EQ(p["enum"]["items"]["$ref"], "#/$defs/tool0_definitions_T");
  EXPECT_EQ(schema["$defs"]["tool0_defs_T"]["type"], "string");
  EXPECT_EQ(schema["$defs"]["tool0_definitions_T"]["type"], "integer");
  EXPECT_TRUE(schema["$defs"].contains("tool0"));
}

TEST(ToolCallsTest, ArgumentsAreAlwaysAnObject) {
  auto empty = Parse(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                         "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->schema, R"({"type":"object"})");
  auto text = Parse(R"({"tools": [{"type": "function", "function": {"name": "f",
                        "parameters": {"type": "string"}}}], "tool_choice": "required"})");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(ParamOf(text.status()), "tools[0].function.parameters");
}

TEST(ToolCallsTest, Refusals) {
  struct Case {
    std::string body;
    const char* param;
  };
  const Case cases[] = {
      {std::string(R"({"tools": [)") + kWeather + "]}", "tool_choice"},  // auto by default
      {std::string(R"({"tools": [)") + kWeather + R"(], "tool_choice": "auto"})", "tool_choice"},
      {std::string(R"({"tools": [)") + kWeather +
           R"(], "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
       "tool_choice"},
      {R"({"tool_choice": "required"})", "tool_choice"},
      {R"({"tools": [{"type": "function", "function": {"name": "bad name"}}], "tool_choice": "required"})",
       "tools[0].function.name"},
      {R"({"tools": [{"type": "retrieval"}], "tool_choice": "required"})", "tools[0].type"},
      {std::string(R"({"tools": [)") + kTime + "," + kTime + R"(], "tool_choice": "required"})",
       "tools[1].function.name"},
      {R"({"functions": [{"name": "f"}]})", "functions"},
  };
  for (const Case& c : cases) {
    auto parsed = Parse(c.body);
    ASSERT_FALSE(parsed.ok()) << c.body;
    EXPECT_EQ(ParamOf(parsed.status()), c.param) << c.body << ": " << parsed.status();
  }
  // tool_choice "none" with tools: plain text, nothing rendered.
  auto none = Parse(std::string(R"({"tools": [)") + kWeather + R"(], "tool_choice": "none"})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->choice.mode, ToolChoice::Mode::kNone);
  EXPECT_TRUE(none->schema.empty());
  EXPECT_TRUE(none->rendered.empty());
}

TEST(ToolCallsTest, CallsFromTheGeneratedText) {
  ToolChoice named{ToolChoice::Mode::kNamed, "get_weather"};
  auto calls = ToolCallsJson(named, R"({"city": "Paris", "unit": "c"})", "7-0");
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0]["id"], "call_7-0_0");
  EXPECT_EQ((*calls)[0]["type"], "function");
  EXPECT_EQ((*calls)[0]["function"]["name"], "get_weather");
  EXPECT_EQ((*calls)[0]["function"]["arguments"], R"({"city": "Paris", "unit": "c"})")
      << "as generated";
  EXPECT_FALSE(ToolCallsJson(named, R"({"city": "Par)", "7").has_value()) << "cut short";
  ToolChoice required{ToolChoice::Mode::kRequired, ""};
  calls = ToolCallsJson(required, R"([{"name": "now", "parameters": {}}, {"name": "get_weather",
      "parameters": {"city": "Oslo"}}])", "x");
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[1]["id"], "call_x_1");
  EXPECT_EQ((*calls)[1]["function"]["arguments"], R"({"city":"Oslo"})");
}

}  // namespace
}  // namespace blossom::gateway
