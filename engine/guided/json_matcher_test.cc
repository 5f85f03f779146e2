#include "engine/guided/json_matcher.h"

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

class Schema {
 public:
  explicit Schema(const char* schema, JsonGrammarOptions options = {}) {
    auto g = CompileJsonSchema(schema, options);
    EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
    if (g.ok()) grammar_ = *std::move(g);
  }
  // The whole of `text` is an output the grammar allows.
  bool Accepts(absl::string_view text) const {
    JsonLinkArena arena;
    JsonState state = matcher_.Start();
    return matcher_.AdvanceAll(state, text, arena) && matcher_.CanEnd(state, arena);
  }
  // `text` can be continued into one.
  bool AllowsPrefix(absl::string_view text) const {
    JsonLinkArena arena;
    JsonState state = matcher_.Start();
    return matcher_.AdvanceAll(state, text, arena);
  }

 private:
  JsonGrammar grammar_;
  JsonMatcher matcher_{&grammar_};
};

TEST(JsonMatcherTest, AnyValue) {
  Schema any("{}");
  for (const char* text :
       {R"({"a": [1, -2.5e+10, "x\u00e9\n", true, null, {}], "b": {"c": []}})", "0", "-0",
        "1E3", "\"\"", "[]", "null", " \n\t{ }", "\"é€😀\"", "[1,2.25,3e-7]"}) {
    EXPECT_TRUE(any.Accepts(text)) << text;
  }
  for (const char* text : {"{} ", "01", "1.", "-", "1e", "+1", ".5", "[1,]", "{\"a\"}", "{,}",
                           "\"\x01\"", "\"\\x\"", "\"\\u12g4\"", "tru", "nulll", "{'a': 1}",
                           "[1 2]", "\"\xC0\x80\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"",
                           "\"\xFF\"", "\"\x80\"", ""}) {
    EXPECT_FALSE(any.Accepts(text)) << text;
  }
  EXPECT_TRUE(any.AllowsPrefix("{\"a\": [1, \"x"));
  EXPECT_TRUE(any.AllowsPrefix("\"\xE2\x82"));  // inside a three-byte character
  EXPECT_FALSE(any.AllowsPrefix("{\"a\" 1"));
}

TEST(JsonMatcherTest, ObjectFollowsPropertyOrderAndRequired) {
  Schema s(R"({"type": "object", "properties": {
      "zeta": {"type": "string"}, "alpha": {"type": "integer"}, "mid": {"type": "boolean"}},
      "required": ["alpha"]})");
  for (const char* text : {R"({"zeta": "a", "alpha": 1})", R"({"alpha": 1})",
                           R"({"alpha":1,"mid":true})", R"({ "zeta":"","alpha":-3,"mid":false })"}) {
    EXPECT_TRUE(s.Accepts(text)) << text;
  }
  for (const char* text : {R"({"alpha": 1, "zeta": "a"})", R"({"zeta": "a"})", "{}",
                           R"({"alpha": 1, "x": 1})", R"({"alpha": "1"})", R"({"alpha": 1.5})",
                           R"({"alpha": 1, "alpha": 2})", R"({"alpha": 1,})", "[]"}) {
    EXPECT_FALSE(s.Accepts(text)) << text;
  }
}

TEST(JsonMatcherTest, ObjectsWithoutPropertiesUseAdditionalProperties) {
  Schema ints(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(ints.Accepts(R"({"a": 1, "b\"c": 2, "a": 3})"));
  EXPECT_TRUE(ints.Accepts("{}"));
  EXPECT_FALSE(ints.Accepts(R"({"a": "1"})"));
  Schema closed(R"({"type": "object", "additionalProperties": false})");
  EXPECT_TRUE(closed.Accepts("{}"));
  EXPECT_FALSE(closed.Accepts(R"({"a": 1})"));
}

TEST(JsonMatcherTest, ArrayBounds) {
  Schema s(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})");
  EXPECT_FALSE(s.Accepts("[]"));
  EXPECT_TRUE(s.Accepts("[1]"));
  EXPECT_TRUE(s.Accepts("[1, 2]"));
  EXPECT_FALSE(s.Accepts("[1, 2, 3]"));
  EXPECT_FALSE(s.AllowsPrefix("[1, 2,"));
  Schema many(R"({"type": "array", "minItems": 3})");
  EXPECT_FALSE(many.Accepts("[1, 2]"));
  EXPECT_TRUE(many.Accepts("[1, \"2\", [3], 4, 5]"));
  Schema none(R"({"type": "array", "items": false})");
  EXPECT_TRUE(none.Accepts("[]"));
  EXPECT_FALSE(none.Accepts("[1]"));
}

TEST(JsonMatcherTest, StringLengthCountsCharactersAndEscapes) {
  Schema s(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(s.Accepts("\"a\""));
  EXPECT_TRUE(s.Accepts("\"ab\""));
  EXPECT_TRUE(s.Accepts("\"é€😀\""));
  EXPECT_TRUE(s.Accepts("\"\\n\\u00e9x\""));
  EXPECT_FALSE(s.Accepts("\"abcd\""));
  EXPECT_FALSE(s.AllowsPrefix("\"abc\\"));
}

TEST(JsonMatcherTest, NumbersAreBounded) {
  Schema number(R"({"type": "number"})");
  EXPECT_TRUE(number.Accepts("1234567890123456.1234567890123456e-123"));
  EXPECT_FALSE(number.Accepts("12345678901234567"));
  EXPECT_FALSE(number.Accepts("1.12345678901234567"));
  EXPECT_FALSE(number.Accepts("1e1234"));
  Schema integer(R"({"type": "integer"})");
  EXPECT_TRUE(integer.Accepts("-42"));
  EXPECT_FALSE(integer.Accepts("1.0"));
  EXPECT_FALSE(integer.Accepts("1e3"));
}

TEST(JsonMatcherTest, EnumsMatchWholeValues) {
  Schema s(R"({"type": "object", "properties": {"v": {"enum": [1, 12, "a", {"k": null}]}},
               "required": ["v"]})");
  for (const char* text : {R"({"v": 1})", R"({"v":12})", R"({"v": "a" })", R"({"v": {"k":null}})"}) {
    EXPECT_TRUE(s.Accepts(text)) << text;
  }
  for (const char* text : {R"({"v": 123})", R"({"v": 2})", R"({"v": "b"})", R"({"v": {"k": null}})"}) {
    EXPECT_FALSE(s.Accepts(text)) << text;
  }
  Schema top(R"({"enum": [1, 12]})");
  EXPECT_TRUE(top.Accepts("1"));
  EXPECT_TRUE(top.Accepts("12"));
  EXPECT_FALSE(top.Accepts("121"));
}

TEST(JsonMatcherTest, UnionsKeepEveryAlternativeUntilTheBytesDecide) {
  Schema s(R"({"anyOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
      {"type": "null"}]})");
  EXPECT_TRUE(s.Accepts(R"({"a": 1})"));
  EXPECT_TRUE(s.Accepts(R"({"a": "1"})"));
  EXPECT_TRUE(s.Accepts("null"));
  EXPECT_FALSE(s.Accepts(R"({"a": true})"));
  Schema nullable(R"({"type": ["string", "null"]})");
  EXPECT_TRUE(nullable.Accepts("\"x\""));
  EXPECT_TRUE(nullable.Accepts("null"));
  EXPECT_FALSE(nullable.Accepts("1"));
}

TEST(JsonMatcherTest, RecursiveSchemas) {
  Schema tree(R"({"$defs": {"node": {"type": "object", "properties": {
      "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["name"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(tree.Accepts(
      R"({"name": "a", "children": [{"name": "b"}, {"name": "c", "children": [{"name": "d"}]}]})"));
  EXPECT_FALSE(tree.Accepts(R"({"name": "a", "children": [{"children": []}]})"));
}

TEST(JsonMatcherTest, WhitespaceRunsAndNestingAreLimited) {
  Schema any("{}");
  EXPECT_TRUE(any.Accepts("[" + std::string(kMaxJsonWhitespace, ' ') + "1]"));
  EXPECT_FALSE(any.AllowsPrefix("[" + std::string(kMaxJsonWhitespace + 1, ' ')));
  // The root frame is one level.
  EXPECT_TRUE(any.Accepts(std::string(kMaxJsonOutputDepth - 1, '[') + std::string(kMaxJsonOutputDepth - 1, ']')));
  EXPECT_FALSE(any.AllowsPrefix(std::string(kMaxJsonOutputDepth, '[')));
}

TEST(JsonMatcherTest, CompactAllowsNoWhitespaceOutsideStrings) {
  Schema compact("{}", JsonGrammarOptions{/*allow_whitespace=*/false});
  EXPECT_TRUE(compact.Accepts(R"({"a b":[1,"c d"]})"));
  EXPECT_FALSE(compact.Accepts(R"({"a": 1})"));
  EXPECT_FALSE(compact.Accepts(" 1"));
}

TEST(JsonMatcherTest, UnionChainsThatShareBranchesStepOncePerLeaf) {
  // 31 links of anyOf[a(i+1), a(i+1)]: stepped naively, 2^30 paths per byte.
  std::string defs;
  for (int i = 0; i < 30; ++i) {
    defs += "\"a" + std::to_string(i) + "\": {\"anyOf\": [{\"$ref\": \"#/$defs/a" +
            std::to_string(i + 1) + "\"}, {\"$ref\": \"#/$defs/a" + std::to_string(i + 1) +
            "\"}]}, ";
  }
  const std::string schema = "{\"$defs\": {" + defs +
                             "\"a30\": {\"type\": \"string\"}}, \"$ref\": \"#/$defs/a0\"}";
  auto g = CompileJsonSchema(schema);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes[g->root].alternatives.size(), 1u);
  Schema chain(schema.c_str());
  EXPECT_TRUE(chain.Accepts("\"fast\""));
}

TEST(JsonMatcherTest, NeverEntersAValueItCannotFinishWithinTheDepthLimit) {
  // A linked list: near the limit only "next": null fits, so the output always can end.
  Schema list(R"({"$defs": {"N": {"type": "object", "properties": {"v": {"type": "integer"},
      "next": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]}}, "required": ["v", "next"]}},
      "$ref": "#/$defs/N"})");
  std::string prefix;
  int levels = 0;
  while (list.AllowsPrefix(prefix + "{\"v\":1,\"next\":{")) {
    prefix += "{\"v\":1,\"next\":";
    ++levels;
  }
  // The root frame, then objects at depths 2..47, each needing a frame above for its "next".
  EXPECT_EQ(levels, static_cast<int>(kMaxJsonOutputDepth) - 3);
  std::string text = prefix + "{\"v\":1,\"next\":null}";
  for (int i = 0; i < levels; ++i) text += "}";
  EXPECT_TRUE(list.Accepts(text));
  // Optional nesting is left out where it cannot fit; the array's next item likewise.
  Schema arrays(R"({"$defs": {"A": {"type": "array", "items": {"$ref": "#/$defs/A"}}},
                    "$ref": "#/$defs/A"})");
  const std::string deepest(kMaxJsonOutputDepth - 1, '[');
  EXPECT_TRUE(arrays.AllowsPrefix(deepest));
  EXPECT_FALSE(arrays.AllowsPrefix(deepest + "["));
  EXPECT_TRUE(arrays.Accepts(deepest + std::string(kMaxJsonOutputDepth - 1, ']')));
}

TEST(JsonMatcherTest, SurrogateEscapesArePairsCountedAsOneCharacter) {
  Schema s(R"({"type": "string", "minLength": 2})");
  EXPECT_TRUE(s.Accepts(R"("\ud83d\ude00x")"));
  EXPECT_FALSE(s.Accepts(R"("\ud83d\ude00")")) << "one character";
  EXPECT_FALSE(s.AllowsPrefix(R"("\udc)")) << "a lone low surrogate";
  EXPECT_FALSE(s.AllowsPrefix(R"("\ud83dx)")) << "a high surrogate alone";
  EXPECT_FALSE(s.AllowsPrefix(R"("\ud83d\u0041)")) << "followed by no low surrogate";
  EXPECT_TRUE(s.Accepts(R"("\uffff\u0000")"));
}

TEST(JsonMatcherTest, NoNumberOverflowsADouble) {
  Schema number(R"({"type": "number"})");
  EXPECT_TRUE(number.Accepts("1e99"));
  EXPECT_TRUE(number.Accepts("1E+99"));
  EXPECT_FALSE(number.Accepts("1e999"));
  EXPECT_FALSE(number.Accepts("1e+100"));
  EXPECT_TRUE(number.Accepts("1e-999")) << "underflow is 0, not an error";
}

TEST(JsonMatcherTest, PatternsAreSearchedAndFormatsMatchedWhole) {
  Schema digits(R"({"type": "string", "pattern": "[0-9]{3}"})");
  EXPECT_TRUE(digits.Accepts(R"("a123b")"));
  EXPECT_FALSE(digits.Accepts(R"("a12b")"));
  EXPECT_TRUE(digits.AllowsPrefix(R"("a12b)")) << "a match can still come";
  Schema word(R"({"type": "string", "pattern": "^[a-z]+$"})");
  EXPECT_TRUE(word.Accepts(R"("abc")"));
  EXPECT_FALSE(word.AllowsPrefix(R"("ab1)"));
  EXPECT_FALSE(word.Accepts(R"("")"));
  EXPECT_FALSE(word.AllowsPrefix("\"a\xC3")) << "no lead byte that leads nowhere";
  // Escapes are the characters they stand for.
  Schema accent(R"({"type": "string", "pattern": "^(é|\n|😀)$"})");
  EXPECT_TRUE(accent.Accepts(R"("\u00e9")"));
  EXPECT_TRUE(accent.Accepts(R"("é")"));
  EXPECT_TRUE(accent.Accepts(R"("\n")"));
  EXPECT_TRUE(accent.Accepts(R"("\ud83d\ude00")"));
  EXPECT_FALSE(accent.AllowsPrefix(R"("\u00e8)"));
  EXPECT_FALSE(accent.AllowsPrefix(R"("\ud83d\ude01)"));
  Schema date(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(date.Accepts(R"("2026-11-27")"));
  EXPECT_FALSE(date.AllowsPrefix(R"("2026-13)"));
  EXPECT_FALSE(date.Accepts(R"("x2026-11-27")")) << "a format is the whole string";
  EXPECT_FALSE(date.AllowsPrefix(R"("2023-02-3)")) << "no February 30th or 31st";
  EXPECT_FALSE(date.Accepts(R"("2023-04-31")"));
  EXPECT_TRUE(date.Accepts(R"("2023-12-31")"));
  Schema when(R"({"format": "date-time"})");
  EXPECT_TRUE(when.Accepts(R"("2026-11-27T23:59:60.5+01:00")"));
  EXPECT_FALSE(when.Accepts(R"("2026-11-27 23:59:60")"));
  Schema id(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(id.Accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
  Schema ip(R"({"type": "string", "format": "ipv4"})");
  EXPECT_TRUE(ip.Accepts(R"("192.168.0.255")"));
  EXPECT_FALSE(ip.Accepts(R"("256.1.1.1")"));
  Schema mail(R"({"type": "string", "format": "email"})");
  EXPECT_TRUE(mail.Accepts(R"("a.b+c@example.co.uk")"));
  EXPECT_FALSE(mail.Accepts(R"("a@b")"));
  EXPECT_FALSE(mail.Accepts(R"(".a@x.co")"));
  EXPECT_FALSE(mail.Accepts(R"("a..b@x.co")"));
}

// Random JSON texts and single-byte mutations of them: where no limit is involved, the matcher
// accepts exactly what nlohmann's parser accepts (leading whitespace included, trailing excluded).
TEST(JsonMatcherTest, AgreesWithAJsonParserOnRandomTexts) {
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    const int kind = depth > 3 ? 2 + pick(4) : pick(6);
    switch (kind) {
      case 0: {
        std::string s = "{";
        for (int i = 0, n = pick(3); i < n; ++i) {
          s += (i ? ", " : "") + std::string("\"k") + std::to_string(i) + "\": " + value(depth + 1);
        }
        return s + "}";
      }
      case 1: {
        std::string s = "[";
        for (int i = 0, n = pick(3); i < n; ++i) s += (i ? "," : "") + value(depth + 1);
        return s + "]";
      }
      case 2: return std::vector<std::string>{"\"\"", "\"a\\n\"", "\"é\"", "\"\\u0041\""}[pick(4)];
      case 3: return std::vector<std::string>{"0", "-12", "3.25", "1e5", "-0.5E-3"}[pick(5)];
      default: return std::vector<std::string>{"true", "false", "null"}[pick(3)];
    }
  };
  const std::string alphabet = "{}[],:\" \n0123456789.-+eEtrufalsn\\a";
  Schema any("{}");
  int accepted = 0, rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = value(0);
    if (round % 3 != 0) {
      const size_t at = rng() % (text.size() + 1);
      switch (pick(3)) {
        case 0: text.insert(at, 1, alphabet[pick(alphabet.size())]); break;
        case 1: if (at < text.size()) text.erase(at, 1); break;
        default: if (at < text.size()) text[at] = alphabet[pick(alphabet.size())]; break;
      }
    }
    if (!text.empty() && (text.back() == ' ' || text.back() == '\n')) continue;
    const bool parses = nlohmann::json::accept(text);
    EXPECT_EQ(any.Accepts(text), parses) << text;
    (parses ? accepted : rejected)++;
  }
  // Both sides of the comparison were exercised.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 300);
}

}  // namespace
}  // namespace blossom
