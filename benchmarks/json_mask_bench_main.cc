// Structured output's cost per step: the time to find the tokens a JSON Schema allows next by
// walking the vocabulary trie (a cache miss), and a cached step, on a vocabulary of BLOOM's size.
//
// No BLOOM tokenizer can be downloaded here, so the vocabulary is synthetic with BPE's shape:
// the 256 bytes, then the distinct substrings (2-12 bytes, words with and without a leading
// space, punctuation runs) of the fixture corpus, then random lowercase words, up to 250,680
// tokens. Usage: json-mask-bench [--vocab N] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/guided/grammar_constraint.h"
#include "engine/guided/json_constraint.h"
#include "engine/guided/regex_constraint.h"
#include "engine/guided/token_vocabulary.h"
#include "tools/cli/dashed_flags.h"

ABSL_FLAG(int32_t, vocab, 250680, "tokens in the synthetic vocabulary");
ABSL_FLAG(int32_t, repeats, 20, "uncached mask computations timed per state (median reported)");
ABSL_FLAG(int32_t, long_output_bytes, 8192, "length of the long outputs whose steps are timed");
ABSL_FLAG(std::string, corpus, "tests/fixtures/corpus.txt", "text the tokens are cut from");

namespace blossom {
namespace {

double Millis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::vector<std::string> SyntheticVocabulary(int32_t size, const std::string& corpus) {
  std::vector<std::string> tokens;
  std::set<std::string> seen;
  auto add = [&](std::string t) {
    if (static_cast<int32_t>(tokens.size()) < size && seen.insert(t).second) tokens.push_back(t);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  for (size_t length = 2; length <= 12; ++length) {
    for (size_t i = 0; i + length <= corpus.size(); ++i) add(corpus.substr(i, length));
  }
  std::mt19937 rng(1);
  while (static_cast<int32_t>(tokens.size()) < size) {
    std::string word = rng() % 2 ? " " : "";
    for (int n = 2 + rng() % 8; n > 0; --n) word += static_cast<char>('a' + rng() % 26);
    add(word);
  }
  return tokens;
}

// A generation's steps late in a long output: one call per output length, as a request's steps
// make them, timed at every length; reported as the mean step over the 256 lengths before each
// mark. The output is one long string (single-byte tokens), so after its first steps the masks
// are cache hits and a step's time is the reading of the output.
template <typename Make>
int LongOutputs(Make make) {
  const int32_t length = absl::GetFlag(FLAGS_long_output_bytes);
  struct Long {
    const char* name;
    const char* schema;
    std::string prefix;
  };
  const Long cases[] = {
      {"json schema: string", R"({"type": "object", "properties": {"s": {"type": "string"}}})",
       "{\"s\": \""},
      {"gbnf json: string",
       R"g(gbnf:root ::= "{" ws "\"s\"" ws ":" ws string ws "}"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\""
ws ::= [ \t\n]*)g",
       "{\"s\": \""},
      {"gbnf: free text", "gbnf:root ::= [^\\n]* \"\\n\"", ""},
  };
  std::vector<int32_t> marks;
  for (int32_t m = 1024; m <= length; m *= 2) marks.push_back(m);
  std::printf("\nlong outputs: mean step (us) over the 256 lengths before each mark\n%-24s", "output");
  for (int32_t m : marks) std::printf(" %10d", m);
  std::printf("\n");
  for (const Long& c : cases) {
    auto constraint = make(c.schema);
    if (!constraint.ok()) {
      std::fprintf(stderr, "%s\n", constraint.status().ToString().c_str());
      return 1;
    }
    std::vector<int32_t> output;
    for (char ch : c.prefix) output.push_back(static_cast<unsigned char>(ch));
    std::vector<double> step_us(static_cast<size_t>(length) + 1, 0.0);
    const char letters[] = "the quick brown fox jumps over a lazy dog ";
    for (int32_t n = static_cast<int32_t>(output.size()); n <= length; ++n) {
      const auto start = std::chrono::steady_clock::now();
      auto mask = (*constraint)->AllowedTokens(output, -1);
      step_us[static_cast<size_t>(n)] = Millis(std::chrono::steady_clock::now() - start) * 1000.0;
      if (!mask.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name, mask.status().ToString().c_str());
        return 1;
      }
      output.push_back(static_cast<unsigned char>(letters[n % (sizeof(letters) - 1)]));
    }
    std::printf("%-24s", c.name);
    for (int32_t m : marks) {
      double sum = 0;
      for (int32_t n = m - 256; n < m; ++n) sum += step_us[static_cast<size_t>(n)];
      std::printf(" %10.1f", sum / 256);
    }
    std::printf("\n");
  }
  return 0;
}

int Run() {
  std::ifstream in(absl::GetFlag(FLAGS_corpus));
  std::stringstream text;
  text << in.rdbuf();
  const auto t0 = std::chrono::steady_clock::now();
  auto vocabulary = std::make_shared<const TokenVocabulary>(
      SyntheticVocabulary(absl::GetFlag(FLAGS_vocab), text.str()));
  const auto t1 = std::chrono::steady_clock::now();
  std::printf("vocabulary: %d tokens, %u trie nodes, built in %.0f ms\n", vocabulary->size(),
              vocabulary->nodes(), Millis(t1 - t0));

  const char* schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
      "address": {"type": "object", "properties": {"city": {"type": "string"}}}},
      "required": ["name", "age"]})";
  // Output prefixes (as bytes; each one is tokenized into single-byte tokens, which the
  // synthetic vocabulary starts with) at the kinds of places a step can be.
  struct Case {
    const char* name;
    const char* prefix;
    const char* schema;  // null: `schema` above; "regex:" + pattern: a RegexConstraint;
                         // "gbnf:" + grammar: a GrammarConstraint
  };
  // JSON as a GBNF grammar (the shape of llama.cpp's json.gbnf).
  static constexpr char kJsonGbnf[] = R"g(gbnf:root ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ws ( "," ws string ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]*)g";
  const Case states[] = {
      {"start", "", nullptr},
      {"after {", "{", nullptr},
      {"inside a key", "{\"na", nullptr},
      {"value position", "{\"name\": ", nullptr},
      {"inside a string", "{\"name\": \"Jo", nullptr},
      {"inside an integer", "{\"name\": \"Jo\", \"age\": 4", nullptr},
      {"after a value", "{\"name\": \"Jo\", \"age\": 42", nullptr},
      {"inside an array", "{\"name\": \"Jo\", \"age\": 42, \"tags\": [\"a\", ", nullptr},
      {"in a date format", "{\"d\": \"2026-1", R"({"properties": {"d": {"format": "date"}}})"},
      {"in a pattern", "{\"p\": \"ab", R"({"properties": {"p": {"pattern": "^[a-z]+-\\d+$"}}})"},
      {"regex, in a class", "The cache", "regex:[A-Za-z ]{1,200}\\."},
      {"gbnf json: start", "", kJsonGbnf},
      {"gbnf json: key", "{\"na", kJsonGbnf},
      {"gbnf json: string", "{\"name\": \"Jo", kJsonGbnf},
      {"gbnf json: number", "{\"name\": \"Jo\", \"age\": 4", kJsonGbnf},
      {"gbnf json: nested", "{\"a\": [{\"b\": [1, {\"c\": \"x", kJsonGbnf},
      {"gbnf: free text", "The cache", "gbnf:root ::= [^\\n]* \"\\n\""},
  };
  std::printf("%-24s %12s %12s %10s\n", "state", "miss ms", "hit us", "allowed");
  auto make_from = [&](const std::string& text)
      -> absl::StatusOr<std::shared_ptr<const TokenConstraint>> {
    if (text.rfind("gbnf:", 0) == 0) {
      auto g = GrammarConstraint::Create(text.substr(5), vocabulary);
      if (!g.ok()) return g.status();
      return std::shared_ptr<const TokenConstraint>(*g);
    }
    if (text.rfind("regex:", 0) == 0) {
      auto r = RegexConstraint::Create(text.substr(6), vocabulary);
      if (!r.ok()) return r.status();
      return std::shared_ptr<const TokenConstraint>(*r);
    }
    auto j = JsonSchemaConstraint::Create(text, {}, vocabulary);
    if (!j.ok()) return j.status();
    return std::shared_ptr<const TokenConstraint>(*j);
  };
  auto make = [&](const Case& c) { return make_from(c.schema == nullptr ? schema : c.schema); };
  for (const Case& c : states) {
    const char* name = c.name;
    const char* prefix = c.prefix;
    std::vector<int32_t> output;
    for (const char* p = prefix; *p != '\0'; ++p) output.push_back(static_cast<unsigned char>(*p));
    std::vector<double> misses;
    size_t allowed = 0;
    for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      // A fresh constraint has an empty cache: every call is a miss.
      auto constraint = make(c);
      if (!constraint.ok()) {
        std::fprintf(stderr, "%s\n", constraint.status().ToString().c_str());
        return 1;
      }
      const auto start = std::chrono::steady_clock::now();
      auto mask = (*constraint)->AllowedTokens(output, /*end_token=*/-1);
      misses.push_back(Millis(std::chrono::steady_clock::now() - start));
      if (!mask.ok()) {
        std::fprintf(stderr, "%s: %s\n", name, mask.status().ToString().c_str());
        return 1;
      }
      allowed = 0;
      for (uint64_t word : **mask) allowed += __builtin_popcountll(word);
    }
    auto constraint = *make(c);
    (void)constraint->AllowedTokens(output, -1);
    const int hits = 200;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < hits; ++i) (void)constraint->AllowedTokens(output, -1);
    const double hit_us = Millis(std::chrono::steady_clock::now() - start) * 1000.0 / hits;
    std::sort(misses.begin(), misses.end());
    std::printf("%-24s %12.2f %12.1f %10zu\n", name, misses[misses.size() / 2], hit_us, allowed);
  }
  return LongOutputs(make_from);
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  blossom::NormalizeDashedFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  return blossom::Run();
}
