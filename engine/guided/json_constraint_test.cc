#include "engine/guided/json_constraint.h"

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/guided/fixture_vocabulary.h"
#include "engine/guided/interleaved_walks.h"
#include "engine/sampling/logits_processors.h"
#include "engine/sampling/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

std::shared_ptr<const JsonSchemaConstraint> Constraint(const char* schema) {
  auto c = JsonSchemaConstraint::Create(schema, {}, FixtureVocabulary());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

// The allowed set by brute force: every token's bytes read from the state after `output`.
std::vector<bool> BruteForce(const char* schema, const std::vector<int32_t>& output,
                             int32_t vocab) {
  auto grammar = CompileJsonSchema(schema);
  JsonMatcher matcher(&*grammar);
  JsonLinkArena arena;
  JsonState state = matcher.Start();
  std::string text;
  for (int32_t t : output) text += std::string(FixtureVocabulary()->bytes(t));
  std::vector<bool> allowed(vocab, false);
  if (!matcher.AdvanceAll(state, text, arena)) return allowed;
  for (int32_t id = 0; id < vocab; ++id) {
    const absl::string_view bytes = FixtureVocabulary()->bytes(id);
    JsonState s = state;
    allowed[id] = !bytes.empty() && matcher.AdvanceAll(s, bytes, arena);
  }
  allowed[kFixtureEos] = matcher.CanEnd(state, arena);
  return allowed;
}

// Random walks through the allowed tokens: each step's mask equals the brute-force set, and
// every walk that ends is a JSON text the caller's check accepts.
void RandomWalks(const char* schema, int walks,
                 const std::function<void(const nlohmann::json&)>& check, int max_steps = 60) {
  auto constraint = Constraint(schema);
  ASSERT_NE(constraint, nullptr);
  const int32_t vocab = FixtureTokenizer().vocab_size();
  std::mt19937 rng(11);
  int ended = 0;
  for (int walk = 0; walk < walks; ++walk) {
    std::vector<int32_t> output;
    for (int step = 0; step < max_steps; ++step) {
      auto mask = constraint->AllowedTokens(output, kFixtureEos);
      ASSERT_TRUE(mask.ok()) << mask.status();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab; ++id) {
        if (TokenAllowed(**mask, id)) allowed.push_back(id);
      }
      if (step % 7 == 0) {
        const std::vector<bool> expected = BruteForce(schema, output, vocab);
        for (int32_t id = 0; id < vocab; ++id) {
          ASSERT_EQ(TokenAllowed(**mask, id), expected[id])
              << "token " << id << " '" << FixtureVocabulary()->bytes(id) << "' after '"
              << FixtureTokenizer().Decode(output) << "'";
        }
      }
      ASSERT_FALSE(allowed.empty()) << FixtureTokenizer().Decode(output);
      for (int32_t id : allowed) {
        ASSERT_TRUE(id == kFixtureEos || !FixtureTokenizer().IsSpecial(id)) << id;
      }
      // Prefer ending, then short tokens (closing brackets), so that walks finish.
      int32_t next = allowed[rng() % allowed.size()];
      if (TokenAllowed(**mask, kFixtureEos)) {
        next = kFixtureEos;
      } else if (step > 30) {
        for (int32_t id : allowed) {
          if (FixtureVocabulary()->bytes(id).size() == 1 && rng() % 2) next = id;
        }
      }
      if (next == kFixtureEos) {
        const std::string text = FixtureTokenizer().Decode(output);
        const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
        ASSERT_FALSE(value.is_discarded()) << text;
        check(value);
        ++ended;
        break;
      }
      output.push_back(next);
    }
  }
  EXPECT_GT(ended, 0);
}

TEST(JsonSchemaConstraintTest, MasksAreTheBruteForceSetsAndEndedOutputsValidate) {
  RandomWalks(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
      "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "bc"]},
      "maxItems": 2}}, "required": ["name", "age"]})",
              40, [](const nlohmann::json& v) {
                ASSERT_TRUE(v.is_object());
                ASSERT_TRUE(v["name"].is_string());
                EXPECT_LE(v["name"].get<std::string>().size(), 6u * 4);
                ASSERT_TRUE(v["age"].is_number_integer());
                if (v.contains("tags")) {
                  EXPECT_LE(v["tags"].size(), 2u);
                }
              });
}

// A batch's outputs through one constraint, each call resuming where that output's reading left
// off (or going back): every mask is the one a fresh constraint gives.
TEST(JsonSchemaConstraintTest, InterleavedOutputsGetTheMasksOfAFreshConstraint) {
  static constexpr char kSchema[] = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 6}, "tags": {"type": "array",
      "items": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {
      "k": {"type": "string", "maxLength": 3}}}]}, "maxItems": 3}},
      "required": ["name", "tags"]})";
  auto shared = Constraint(kSchema);
  ASSERT_NE(shared, nullptr);
  ExpectInterleavedCallsMatchFresh(*shared, [] { return Constraint(kSchema); }, 5, 400, 5);
}

// Several sampling threads on one constraint: each takes a kept reading out while it reads with
// it, so no two use one arena at once (TSan checks this).
TEST(JsonSchemaConstraintTest, ThreadsShareOneConstraint) {
  static constexpr char kSchema[] = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 6}}, "required": ["name"]})";
  auto shared = Constraint(kSchema);
  ASSERT_NE(shared, nullptr);
  std::vector<std::thread> threads;
  for (uint32_t seed = 0; seed < 4; ++seed) {
    threads.emplace_back([&, seed] {
      ExpectInterleavedCallsMatchFresh(*shared, [] { return Constraint(kSchema); }, 3, 100, seed);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(JsonSchemaConstraintTest, PatternsAndFormatsByBruteForce) {
  RandomWalks(R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{1,3}$"},
      "day": {"type": "string", "format": "date"}, "note": {"type": "string", "pattern": "^(é|e)$"}},
      "required": ["code", "day"]})",
              40, [](const nlohmann::json& v) {
                ASSERT_TRUE(v.is_object());
                const std::string code = v["code"].get<std::string>();
                EXPECT_TRUE(code.size() >= 4 && code[2] == '-') << code;
                EXPECT_EQ(v["day"].get<std::string>().size(), 10u);
                if (v.contains("note")) {
                  const std::string note = v["note"].get<std::string>();
                  EXPECT_TRUE(note == "é" || note == "e") << note;
                }
              },
              /*max_steps=*/400);
}

TEST(JsonSchemaConstraintTest, AnyObject) {
  RandomWalks(R"({"type": "object"})", 20,
              [](const nlohmann::json& v) { EXPECT_TRUE(v.is_object()); });
}

TEST(JsonSchemaConstraintTest, MasksAreCachedByMatcherState) {
  auto constraint = Constraint(R"({"type": "object", "properties": {"s": {"type": "string"}}})");
  ASSERT_NE(constraint, nullptr);
  const Tokenizer& t = FixtureTokenizer();
  auto first = t.Encode("{\"s\": \"hello");
  auto second = t.Encode("{\"s\": \"hello world and more");
  ASSERT_TRUE(first.ok() && second.ok());
  auto a = constraint->AllowedTokens(*first, kFixtureEos);
  ASSERT_TRUE(a.ok()) << a.status();
  const int64_t computed = constraint->masks_computed();
  auto b = constraint->AllowedTokens(*second, kFixtureEos);
  ASSERT_TRUE(b.ok()) << b.status();
  // Inside the same unbounded string: the same state, the same mask.
  EXPECT_EQ(constraint->masks_computed(), computed);
  EXPECT_EQ(a->get(), b->get());
  // Another end token is another mask.
  ASSERT_TRUE(constraint->AllowedTokens(*first, 3).ok());
  EXPECT_EQ(constraint->masks_computed(), computed + 1);
}

TEST(JsonSchemaConstraintTest, AnOutputOutsideTheSchemaIsFailedPrecondition) {
  auto constraint = Constraint(R"({"type": "object"})");
  ASSERT_NE(constraint, nullptr);
  auto ids = FixtureTokenizer().Encode("[1]");
  ASSERT_TRUE(ids.ok());
  auto mask = constraint->AllowedTokens(*ids, kFixtureEos);
  EXPECT_EQ(mask.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(constraint->AllowedTokens({kFixtureEos}, kFixtureEos).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(JsonSchemaConstraintTest, TheSamplerOnlyPicksAllowedTokens) {
  auto constraint = Constraint(R"({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                   "required": ["ok"]})");
  ASSERT_NE(constraint, nullptr);
  SamplingParams params;
  params.temperature = 0.0f;
  params.constraint = constraint;
  // Logits that favour "[" and the highest ids: greedy decoding must still write the object.
  const int32_t vocab = FixtureTokenizer().vocab_size() + 8;  // the model's row may be wider
  std::vector<float> logits(vocab);
  for (int32_t i = 0; i < vocab; ++i) logits[i] = static_cast<float>(i) / vocab;
  logits[FixtureTokenizer().Encode("[")->front()] = 10.0f;
  std::vector<int32_t> output;
  SamplerScratch scratch;
  // Whitespace runs are bounded (kMaxJsonWhitespace), so even logits that favour whitespace
  // finish the object.
  for (int step = 0; step < 400; ++step) {
    SamplingContext ctx;
    ctx.output_tokens = output;
    ctx.end_token = kFixtureEos;
    ASSERT_TRUE(PrepareLogits(logits, params, ctx, scratch).ok());
    auto token = GreedyToken(scratch);
    ASSERT_TRUE(token.ok()) << token.status();
    if (*token == kFixtureEos) break;
    output.push_back(*token);
  }
  const std::string text = FixtureTokenizer().Decode(output);
  const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(value.is_discarded()) << text;
  EXPECT_TRUE(value["ok"].is_boolean()) << text;
}

}  // namespace
}  // namespace blossom
