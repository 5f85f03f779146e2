#include "engine/guided/json_grammar_analysis.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace blossom {

absl::Status JsonGrammarAnalysis::Error(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("json schema at ", path.empty() ? "/" : path.substr(0, 128), ": ", what));
}

absl::Status JsonGrammarAnalysis::CheckNoEmptyCycles() const {
  // A union only forwards to its alternatives; a cycle of unions would loop without reading a
  // byte ({"$ref": "#"} as the whole schema, or two definitions naming each other).
  std::vector<uint8_t> color(grammar_.nodes.size(), 0);
  for (size_t i = 0; i < grammar_.nodes.size(); ++i) {
    if (HasUnionCycle(static_cast<int32_t>(i), color)) {
      return absl::InvalidArgumentError(
          "json schema: a $ref leads back to itself without a value in between");
    }
  }
  return absl::OkStatus();
}

// Replaces each union's alternatives by the distinct non-union nodes they lead to (cycles of
// unions were refused), so that a step fans out once per alternative: a chain of unions that
// share branches would otherwise double the work at each link.
absl::Status JsonGrammarAnalysis::FlattenUnions() {
  std::vector<std::vector<int32_t>> flat(grammar_.nodes.size());
  std::vector<bool> done(grammar_.nodes.size(), false);
  size_t entries = 0;
  std::function<const std::vector<int32_t>&(int32_t)> visit =
      [&](int32_t u) -> const std::vector<int32_t>& {
    if (done[u]) return flat[u];
    std::vector<int32_t> out;
    for (int32_t a : grammar_.nodes[u].alternatives) {
      const bool is_union = grammar_.nodes[a].kind == JsonNode::Kind::kUnion;
      const std::vector<int32_t> one = {a};
      for (int32_t leaf : is_union ? visit(a) : one) {
        if (std::find(out.begin(), out.end(), leaf) == out.end()) out.push_back(leaf);
      }
    }
    entries += out.size();
    flat[u] = std::move(out);
    done[u] = true;
    return flat[u];
  };
  for (size_t i = 0; i < grammar_.nodes.size(); ++i) {
    if (grammar_.nodes[i].kind == JsonNode::Kind::kUnion) visit(static_cast<int32_t>(i));
    if (entries > kMaxJsonGrammarNodes * 64) {
      return absl::InvalidArgumentError("json schema: its unions have too many alternatives");
    }
  }
  for (size_t i = 0; i < grammar_.nodes.size(); ++i) {
    if (grammar_.nodes[i].kind == JsonNode::Kind::kUnion) {
      grammar_.nodes[i].alternatives = std::move(flat[i]);
    }
  }
  return absl::OkStatus();
}

// JsonNode::min_depth of every node, by relaxation from "never" (a value that must nest
// forever keeps it), then the root's check.
absl::Status JsonGrammarAnalysis::ComputeMinDepths(int32_t root) {
  constexpr uint32_t kNever = std::numeric_limits<uint32_t>::max();
  std::vector<JsonNode>& nodes = grammar_.nodes;
  for (JsonNode& n : nodes) n.min_depth = kNever;
  auto below = [](uint32_t d) { return d == kNever ? kNever : d + 1; };
  for (bool changed = true; changed;) {
    changed = false;
    for (JsonNode& n : nodes) {
      uint32_t d = 1;
      switch (n.kind) {
        case JsonNode::Kind::kUnion:
          d = kNever;
          for (int32_t a : n.alternatives) d = std::min(d, nodes[a].min_depth);
          break;
        case JsonNode::Kind::kObject:
          for (size_t j = 0; j < n.keys.size(); ++j) {
            if (n.next_required[j] == j) d = std::max(d, below(nodes[n.values[j]].min_depth));
          }
          break;
        case JsonNode::Kind::kArray:
          if (n.min_items > 0) d = below(nodes[n.items].min_depth);
          break;
        default:
          break;
      }
      if (d < n.min_depth) {
        n.min_depth = d;
        changed = true;
      }
    }
  }
  if (nodes[root].min_depth == kNever) {
    return absl::InvalidArgumentError(
        "json schema: no value satisfies it (its required values nest forever)");
  }
  if (nodes[root].min_depth + 1 > kMaxJsonOutputDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "json schema: its required values nest deeper than ", kMaxJsonOutputDepth - 1, " levels"));
  }
  return absl::OkStatus();
}

// oneOf is enforced as anyOf, which is right only when no value matches two alternatives:
// refused unless each pair is told apart by the kind of value, or (objects) by a required
// property both have whose allowed values are disjoint literals (a discriminator).
absl::Status JsonGrammarAnalysis::CheckOneOfsAreDisjoint() const {
  for (const OneOfUse& one : one_of_) {
    for (size_t x = 0; x < one.alternatives.size(); ++x) {
      for (size_t y = x + 1; y < one.alternatives.size(); ++y) {
        if (!Disjoint(one.alternatives[x], one.alternatives[y])) {
          return Error(absl::StrCat(one.path, "/oneOf"),
                       absl::StrCat("alternatives ", x, " and ", y,
                                    " can match the same value, which oneOf forbids and this "
                                    "grammar cannot tell apart (use anyOf)"));
        }
      }
    }
  }
  return absl::OkStatus();
}


// The non-union nodes a node stands for (after FlattenUnions).
std::vector<int32_t> JsonGrammarAnalysis::Leaves(int32_t node) const {
  const JsonNode& n = grammar_.nodes[node];
  return n.kind == JsonNode::Kind::kUnion ? n.alternatives : std::vector<int32_t>{node};
}

// Kinds of JSON value a node may be: bits of object, array, string, number, true, false, null.
uint32_t JsonGrammarAnalysis::Kinds(int32_t node) const {
  uint32_t kinds = 0;
  for (int32_t leaf : Leaves(node)) {
    const JsonNode& n = grammar_.nodes[leaf];
    switch (n.kind) {
      case JsonNode::Kind::kObject: kinds |= 1; break;
      case JsonNode::Kind::kArray: kinds |= 2; break;
      case JsonNode::Kind::kString: kinds |= 4; break;
      case JsonNode::Kind::kNumber: kinds |= 8; break;
      case JsonNode::Kind::kLiteral:
        for (const std::string& lit : n.literals) {
          const char c = lit[0];
          kinds |= c == '{' ? 1 : c == '[' ? 2 : c == '"' ? 4 : c == 't' ? 16 : c == 'f' ? 32
                   : c == 'n' ? 64 : 8;
        }
        break;
      case JsonNode::Kind::kUnion: break;
    }
  }
  return kinds;
}

// The literals a node allows, or false when it allows more than literals.
bool JsonGrammarAnalysis::LiteralsOf(int32_t node, std::set<std::string>* out) const {
  for (int32_t leaf : Leaves(node)) {
    const JsonNode& n = grammar_.nodes[leaf];
    if (n.kind != JsonNode::Kind::kLiteral) return false;
    out->insert(n.literals.begin(), n.literals.end());
  }
  return true;
}

bool JsonGrammarAnalysis::Disjoint(int32_t x, int32_t y) const {
  if ((Kinds(x) & Kinds(y)) == 0) return true;
  const std::vector<int32_t> xs = Leaves(x), ys = Leaves(y);
  if (xs.size() != 1 || ys.size() != 1) return false;
  const JsonNode& a = grammar_.nodes[xs[0]];
  const JsonNode& b = grammar_.nodes[ys[0]];
  if (a.kind != JsonNode::Kind::kObject || b.kind != JsonNode::Kind::kObject) return false;
  for (size_t i = 0; i < a.keys.size(); ++i) {
    if (a.next_required[i] != i) continue;
    for (size_t j = 0; j < b.keys.size(); ++j) {
      if (b.keys[j] != a.keys[i] || b.next_required[j] != j) continue;
      std::set<std::string> la, lb;
      if (!LiteralsOf(a.values[i], &la) || !LiteralsOf(b.values[j], &lb)) continue;
      // Compared as JSON values, not text: 1 and 1.0 are the same value to a validator, and
      // so are objects with their keys in another order (nlohmann::json sorts them).
      bool overlap = false;
      for (const std::string& l : la) {
        const nlohmann::json value = nlohmann::json::parse(l, nullptr, false);
        for (const std::string& m : lb) {
          overlap |= value == nlohmann::json::parse(m, nullptr, false);
        }
      }
      if (!overlap) return true;
    }
  }
  return false;
}

bool JsonGrammarAnalysis::HasUnionCycle(int32_t i, std::vector<uint8_t>& color) const {
  if (grammar_.nodes[i].kind != JsonNode::Kind::kUnion || color[i] == 2) return false;
  if (color[i] == 1) return true;
  color[i] = 1;
  for (int32_t a : grammar_.nodes[i].alternatives) {
    if (HasUnionCycle(a, color)) return true;
  }
  color[i] = 2;
  return false;
}

}  // namespace blossom
