// The checks and rewrites a JsonGrammar gets once its nodes are compiled (json_grammar.cc):
// refusing cycles of unions, flattening unions, each node's minimum depth, and oneOf's
// disjointness. Internal to the json_grammar target.
#ifndef BLOSSOM_ENGINE_GUIDED_JSON_GRAMMAR_ANALYSIS_H_
#define BLOSSOM_ENGINE_GUIDED_JSON_GRAMMAR_ANALYSIS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/guided/json_grammar.h"

namespace blossom {

// A oneOf in the schema: its union node, its alternatives as written, and where it is.
struct OneOfUse {
  int32_t node;
  std::vector<int32_t> alternatives;
  std::string path;
};

// Not thread-safe; works on the grammar it is given, in the order of the public methods.
class JsonGrammarAnalysis {
 public:
  JsonGrammarAnalysis(JsonGrammar& grammar, std::vector<OneOfUse> one_of)
      : grammar_(grammar), one_of_(std::move(one_of)) {}

  absl::Status CheckNoEmptyCycles() const;
  absl::Status FlattenUnions();
  absl::Status ComputeMinDepths(int32_t root);
  absl::Status CheckOneOfsAreDisjoint() const;

 private:
  std::vector<int32_t> Leaves(int32_t node) const;
  uint32_t Kinds(int32_t node) const;
  bool LiteralsOf(int32_t node, std::set<std::string>* out) const;
  bool Disjoint(int32_t x, int32_t y) const;
  bool HasUnionCycle(int32_t i, std::vector<uint8_t>& color) const;
  static absl::Status Error(const std::string& path, absl::string_view what);

  JsonGrammar& grammar_;
  std::vector<OneOfUse> one_of_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_JSON_GRAMMAR_ANALYSIS_H_
