#include "engine/guided/json_grammar.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const JsonNode& Root(const JsonGrammar& g) { return g.nodes[g.root]; }

TEST(JsonGrammarTest, PropertiesKeepTheSchemasOrderAndRequiredBoundsTheNextKeys) {
  auto g = CompileJsonSchema(R"({"type": "object", "properties": {
      "zeta": {"type": "string"}, "alpha": {"type": "integer"}, "mid": {"type": "boolean"}},
      "required": ["alpha"]})");
  ASSERT_TRUE(g.ok()) << g.status();
  const JsonNode& object = Root(*g);
  EXPECT_EQ(object.kind, JsonNode::Kind::kObject);
  EXPECT_THAT(object.keys, ElementsAre("\"zeta\"", "\"alpha\"", "\"mid\""));
  // From 0 or 1 the next key can be at most "alpha" (required); after it, anything.
  EXPECT_THAT(object.next_required, ElementsAre(1, 1, 3, 3));
  EXPECT_EQ(g->nodes[object.values[1]].kind, JsonNode::Kind::kNumber);
  EXPECT_TRUE(g->nodes[object.values[1]].integer);
  EXPECT_EQ(object.additional, -1);
}

TEST(JsonGrammarTest, KeysAreJsonTextWithEscapes) {
  auto g = CompileJsonSchema(R"({"properties": {"a\"b": {}, "é": {}}})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(Root(*g).keys, ElementsAre("\"a\\\"b\"", "\"é\""));
}

TEST(JsonGrammarTest, EnumAndConstAreLiteralsFilteredByType) {
  auto g = CompileJsonSchema(R"({"type": "string", "enum": ["red", 1, "green", null]})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Root(*g).kind, JsonNode::Kind::kLiteral);
  EXPECT_THAT(Root(*g).literals, ElementsAre("\"red\"", "\"green\""));
  g = CompileJsonSchema(R"({"const": {"b": 1, "a": [true]}})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(Root(*g).literals, ElementsAre(R"({"b":1,"a":[true]})"));
  g = CompileJsonSchema(R"({"type": "integer", "enum": [1.5, 2.0, 3]})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(Root(*g).literals, ElementsAre("2.0", "3"));
}

TEST(JsonGrammarTest, TypeListsAndAnyOfAreUnions) {
  auto g = CompileJsonSchema(R"({"type": ["string", "null"], "maxLength": 3})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(Root(*g).kind, JsonNode::Kind::kUnion);
  ASSERT_EQ(Root(*g).alternatives.size(), 2u);
  g = CompileJsonSchema(R"({"anyOf": [{"type": "number"}, {"type": "array"}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Root(*g).kind, JsonNode::Kind::kUnion);
}

TEST(JsonGrammarTest, RefsResolveAndMayRecurse) {
  auto g = CompileJsonSchema(R"({"$defs": {"node": {"type": "object", "properties": {
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
      "$ref": "#/$defs/node"})");
  ASSERT_TRUE(g.ok()) << g.status();
  g = CompileJsonSchema(R"({"definitions": {"x": {"type": "integer"}},
      "properties": {"a": {"$ref": "#/definitions/x"}, "b": {"$ref": "#/definitions/x"}}})");
  ASSERT_TRUE(g.ok()) << g.status();
  // Both properties share the compiled definition.
  EXPECT_EQ(Root(*g).values[0], Root(*g).values[1]);
}

TEST(JsonGrammarTest, EmptySchemaAndTrueAreAnyValue) {
  for (const char* schema : {"{}", "true", R"({"title": "anything"})"}) {
    auto g = CompileJsonSchema(schema);
    ASSERT_TRUE(g.ok()) << schema << ": " << g.status();
    EXPECT_EQ(Root(*g).kind, JsonNode::Kind::kUnion) << schema;
    EXPECT_EQ(Root(*g).alternatives.size(), 5u) << schema;
  }
}

TEST(JsonGrammarTest, RefusesWhatItCannotEnforceNamingKeywordAndPlace) {
  struct Case {
    const char* schema;
    const char* message;
  };
  const Case cases[] = {
      {R"({"type": "string", "pattern": "^a", "maxLength": 3})",
       "json schema at /: 'pattern' beside minLength or maxLength is not supported"},
      {R"({"type": "string", "pattern": "(a"})", "'pattern': regex at byte 2: an unterminated ("},
      {R"({"type": "string", "pattern": "^a|b"})", "beside a top-level |"},
      {R"({"properties": {"age": {"type": "integer", "minimum": 0}}})",
       "json schema at /properties/age: 'minimum' is not supported"},
      {R"({"type": "string", "format": "ipv6"})", "format 'ipv6' is not supported"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems' is not supported"},
      {R"({"type": "array", "items": [{"type": "string"}]})", "tuples"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
       "'required' names 'b', which is not in 'properties'"},
      {R"({"type": "strin"})", "'type' must be"},
      {R"({"type": "string", "minLength": 4, "maxLength": 2})", "'maxLength' is below"},
      {R"({"minItems": -1})", "'minItems' must be a non-negative integer"},
      {R"({"enum": []})", "'enum' must be a non-empty list"},
      {R"({"type": "string", "enum": [1, 2]})", "no enum or const value has the schema's type"},
      {R"({"$ref": "#/$defs/missing"})", "is not \"#\" or a schema under"},
      {R"({"$ref": "#"})", "leads back to itself"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
       "leads back to itself"},
      {R"({"anyOf": [{}], "type": "string"})", "'anyOf' beside other constraints"},
      {R"({"allOf": [{}, {}]})", "exactly one schema"},
      {"false", "allows no value"},
      {R"({"type": "string", "enum": ["a", "abcdef"], "maxLength": 3})",
       "'maxLength' beside enum or const is not supported"},
      {R"({"const": "ab", "minLength": 5})", "beside enum or const"},
      {R"({"properties": {"s": {"$ref": "#"}}, "required": ["s"]})", "nest forever"},
      {R"({"type": "array", "items": {"$ref": "#"}, "minItems": 1})", "nest forever"},
      {R"({"oneOf": [{"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]},
                     {"type": "object", "properties": {"k": {"const": 1.0}}, "required": ["k"]}]})",
       "can match the same value"},
      {R"({"type": "integer", "format": "int32"})", "'format' is supported on strings only"},
      {R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})",
       "alternatives 0 and 1 can match the same value"},
      {R"({"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
                     {"type": "object", "properties": {"k": {"enum": ["b", "a"]}}, "required": ["k"]}]})",
       "can match the same value"},
      {"[1]", "must be an object or a boolean"},
      {"{", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto g = CompileJsonSchema(c.schema);
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << c.schema;
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(c.message)) << c.schema;
  }
}

TEST(JsonGrammarTest, OneOfWithDistinctKindsOrADiscriminatorIsAccepted) {
  for (const char* schema : {
           R"({"oneOf": [{"type": "string"}, {"type": "null"}, {"type": "integer"}]})",
           R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "cat"},
                "lives": {"type": "integer"}}, "required": ["kind"]},
               {"type": "object", "properties": {"kind": {"const": "dog"}},
                "required": ["kind"]}]})",
           R"({"oneOf": [{"enum": [1, 2]}, {"enum": ["1", true]}]})"}) {
    auto g = CompileJsonSchema(schema);
    EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
  }
}

TEST(JsonGrammarTest, RefusesRequiredNestingPastTheDepthLimit) {
  std::string deep = "{}";
  for (uint32_t i = 0; i < kMaxJsonOutputDepth; ++i) {
    deep = R"({"type": "object", "properties": {"a": )" + deep + R"(}, "required": ["a"]})";
  }
  auto g = CompileJsonSchema(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("nest deeper than 47 levels"));
}

TEST(JsonGrammarTest, RefusesOversizedAndDeepSchemas) {
  std::string nested_const = R"({"const": )" + std::string(200, '[') + std::string(200, ']') + "}";
  auto nested = CompileJsonSchema(nested_const);
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(std::string(nested.status().message()), HasSubstr("nested deeper than 128"));
  EXPECT_FALSE(CompileJsonSchema(std::string(kMaxJsonSchemaBytes + 1, ' ')).ok());
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}";
  for (int i = 0; i < 100; ++i) deep += "}";
  auto g = CompileJsonSchema(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("nest deeper than 64"));
  std::string wide = R"({"anyOf": [)";
  for (size_t i = 0; i < kMaxJsonGrammarNodes + 1; ++i) {
    wide += std::string(i ? "," : "") + R"({"enum":[1]})";
  }
  wide += "]}";
  g = CompileJsonSchema(wide);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("grammar nodes"));
}

// A security audit's finding: each of a schema's patterns was held to the regex work bound on its
// own, so a few KB of schema holding hundreds of costly patterns ("(a*b*){999}", 0.15 s each) took
// a server thread for minutes per request. Now the patterns share one budget, and a pattern the
// schema repeats is compiled once.
TEST(JsonGrammarTest, APatternsBudgetIsSharedByTheWholeSchema) {
  auto many_distinct = [](int n) {
    std::string schema = R"({"anyOf": [)";
    for (int i = 0; i < n; ++i) {
      schema += std::string(i ? "," : "") + R"({"type": "string", "pattern": "(a*b*){999})" +
                std::to_string(i) + R"("})";
    }
    return schema + "]}";
  };
  auto heavy = CompileJsonSchema(many_distinct(300));
  ASSERT_FALSE(heavy.ok());
  EXPECT_THAT(std::string(heavy.status().message()), HasSubstr("beside the other patterns"));
  // The same costly pattern 300 times: one DFA.
  std::string repeated = R"({"anyOf": [)";
  for (int i = 0; i < 300; ++i) {
    repeated += std::string(i ? "," : "") + R"({"type": "string", "pattern": "(a*b*){999}"})";
  }
  auto shared = CompileJsonSchema(repeated + "]}");
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(shared->patterns.size(), 1u);
  // What real schemas hold fits easily: every format, each in 20 properties, plus 60 distinct
  // everyday patterns.
  std::string everyday = R"({"type": "object", "properties": {)";
  int field = 0;
  for (const char* format : {"date", "time", "date-time", "uuid", "ipv4", "email", "hostname"}) {
    for (int i = 0; i < 20; ++i) {
      everyday += std::string(field ? "," : "") + "\"f" + std::to_string(field) +
                  R"(": {"type": "string", "format": ")" + format + R"("})";
      ++field;
    }
  }
  for (int i = 0; i < 60; ++i) {
    everyday += ",\"p" + std::to_string(i) + R"(": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{)" +
                std::to_string(i % 8 + 1) + "," + std::to_string(i + 9) + R"(}$"})";
  }
  auto real = CompileJsonSchema(everyday + "}}");
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_EQ(real->patterns.size(), 7u + 60u);
}

}  // namespace
}  // namespace blossom
