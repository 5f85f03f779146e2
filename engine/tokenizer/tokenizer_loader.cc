// Supported tokenizer.json subset (everything else is refused with InvalidArgument):
//   version            "1.0" or absent
//   truncation,padding null or absent (Hugging Face would truncate/pad inside encode())
//   normalizer         null or absent
//   pre_tokenizer      ByteLevel{add_prefix_space: false, use_regex: false}, alone or as the
//                      last element of a Sequence whose only other element (first) is
//                      Split{pattern: {Regex: BLOOM's pattern}, behavior: Isolated, invert: false}
//   model              BPE; dropout null or 0; byte_fallback false; continuing_subword_prefix and
//                      end_of_word_suffix null or ""; unk_token null or a vocab entry; fuse_unk and
//                      ignore_merges either way; merges as "a b" strings or [a, b] pairs
//   decoder            ByteLevel (its flags do not affect decoding)
//   post_processor     null, ByteLevel (offsets only), TemplateProcessing whose single template is
//                      just $A, or a Sequence of those: none adds ids to a single sequence
//   added_tokens       single_word false; lstrip, rstrip, normalized, special either way
//
// Every algorithm below mirrors a specific piece of huggingface/tokenizers (named in comments) so
// that ids match exactly, including the corner cases of its implementation.
//
// This file is Tokenizer's loading half: tokenizer.json parsing and validation, and the tables
// Encode and Decode (tokenizer.cc) read. It is part of the tokenizer target rather than a library
// of its own because TokenizerLoader fills Tokenizer's private members (it is a friend).
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/text/utf8.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "kernels/status_macros.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace blossom {
namespace {

using Json = nlohmann::json;

// Ids index dense per-id tables; real vocabularies are far below this (BLOOM: 250,680).
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;

std::string ShowJson(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

std::string ShowString(absl::string_view s) { return ShowJson(Json(std::string(s))); }

}  // namespace

// Parses and validates tokenizer.json into a Tokenizer. Errors name "<source>: <json path>".
class TokenizerLoader {
 public:
  explicit TokenizerLoader(absl::string_view source) : source_(source) {}

  absl::StatusOr<std::unique_ptr<Tokenizer>> Load(absl::string_view text) {
    Json root;
    try {
      root = Json::parse(text.begin(), text.end());
    } catch (const Json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": malformed JSON: ", e.what()));
    }
    // Accessors below check types before reading, but a stray nlohmann exception must never
    // escape this library.
    try {
      auto tok = std::unique_ptr<Tokenizer>(new Tokenizer());
      absl::Status status = LoadRoot(root, tok.get());
      if (!status.ok()) return status;
      return tok;
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": ", e.what()));
    }
  }

 private:
  absl::Status Error(absl::string_view path, const Json& value, absl::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": ", path, " = ", ShowJson(value), ": ", why));
  }
  // For a component of the wrong kind, shows just its "type" (the whole object can be huge).
  absl::Status TypeError(const std::string& path, const Json& value, absl::string_view why) const {
    if (value.is_object() && value.contains("type")) {
      return Error(path + ".type", value["type"], why);
    }
    return Error(path, value, why);
  }
  absl::Status Missing(absl::string_view path, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", path, " is missing: ", why));
  }

  // Reads a required boolean field.
  absl::Status GetBool(const Json& obj, absl::string_view key, absl::string_view path,
                       bool* out) const {
    const std::string field = absl::StrCat(path, ".", key);
    auto it = obj.find(std::string(key));
    if (it == obj.end()) return Missing(field, "expected a boolean");
    if (!it->is_boolean()) return Error(field, *it, "expected a boolean");
    *out = it->get<bool>();
    return absl::OkStatus();
  }

  // Reads the "type" field of an object ("" if absent or not a string).
  static std::string TypeOf(const Json& obj) {
    if (!obj.is_object()) return "";
    auto it = obj.find("type");
    if (it == obj.end() || !it->is_string()) return "";
    return it->get<std::string>();
  }

  // Top-level fields that must be null (or absent) because we do not implement them.
  absl::Status RequireNull(const Json& root, absl::string_view key, absl::string_view why) const {
    auto it = root.find(std::string(key));
    if (it != root.end() && !it->is_null()) return TypeError(std::string(key), *it, why);
    return absl::OkStatus();
  }

  absl::Status LoadRoot(const Json& root, Tokenizer* tok) {
    if (!root.is_object()) return Error("(root)", root, "expected a JSON object");
    if (auto it = root.find("version"); it != root.end()) {
      if (!it->is_string() || it->get<std::string>() != "1.0") {
        return Error("version", *it, "only tokenizer.json version \"1.0\" is known");
      }
    }
    // truncation and padding are the state of the trainer's last tokenizer(..., truncation=True,
    // padding=...) call, which save_pretrained writes out; transformers turns both off for a
    // plain tokenizer(text), as every server encodes. Ignored here too, with a warning.
    for (const char* key : {"truncation", "padding"}) {
      auto it = root.find(key);
      if (it == root.end() || it->is_null()) continue;
      if (!it->is_object()) return Error(key, *it, "expected an object or null");
      spdlog::warn("tokenizer {}: ignoring its saved {} settings ({}), as transformers does when "
                   "encoding a text without asking for {}",
                   source_, key, ShowJson(*it), key);
    }
    BLOSSOM_RETURN_IF_ERROR(
        RequireNull(root, "normalizer", "only a null normalizer is supported"));
    auto pre = root.find("pre_tokenizer");
    if (pre == root.end()) return Missing("pre_tokenizer", "a ByteLevel pre-tokenizer is required");
    BLOSSOM_RETURN_IF_ERROR(LoadPreTokenizer(*pre, "pre_tokenizer", tok));
    auto model = root.find("model");
    if (model == root.end()) return Missing("model", "a BPE model is required");
    BLOSSOM_RETURN_IF_ERROR(LoadModel(*model, tok));
    auto decoder = root.find("decoder");
    if (decoder == root.end()) return Missing("decoder", "a ByteLevel decoder is required");
    if (TypeOf(*decoder) != "ByteLevel") {
      return TypeError("decoder", *decoder, "only the ByteLevel decoder is supported");
    }
    if (auto it = root.find("post_processor"); it != root.end()) {
      BLOSSOM_RETURN_IF_ERROR(CheckPostProcessor(*it, "post_processor"));
    }
    if (auto it = root.find("added_tokens"); it != root.end()) {
      BLOSSOM_RETURN_IF_ERROR(LoadAddedTokens(*it, tok));
    }
    BuildIdTables(tok);
    tok->BuildTrie(/*normalized=*/false, &tok->non_normalized_trie_);
    tok->BuildTrie(/*normalized=*/true, &tok->normalized_trie_);
    return absl::OkStatus();
  }

  absl::Status LoadPreTokenizer(const Json& pre, const std::string& path, Tokenizer* tok) {
    const std::string type = TypeOf(pre);
    if (type == "ByteLevel") return CheckByteLevelPreTokenizer(pre, path);
    if (type != "Sequence") {
      return TypeError(
          path, pre, "only ByteLevel, or Sequence[Split (BLOOM's regex), ByteLevel], is supported");
    }
    auto list = pre.find("pretokenizers");
    if (list == pre.end() || !list->is_array() || list->empty() || list->size() > 2) {
      return Error(path + ".pretokenizers", list == pre.end() ? Json() : *list,
                   "expected [Split, ByteLevel] or [ByteLevel]");
    }
    const size_t last = list->size() - 1;
    BLOSSOM_RETURN_IF_ERROR(CheckByteLevelPreTokenizer(
        (*list)[last], absl::StrCat(path, ".pretokenizers[", last, "]")));
    if (last == 1) {
      BLOSSOM_RETURN_IF_ERROR(CheckSplit((*list)[0], path + ".pretokenizers[0]"));
      tok->split_regex_ = true;
    }
    return absl::OkStatus();
  }

  absl::Status CheckByteLevelPreTokenizer(const Json& bl, const std::string& path) {
    if (TypeOf(bl) != "ByteLevel") {
      return TypeError(path, bl, "expected a ByteLevel pre-tokenizer");
    }
    bool add_prefix_space;
    BLOSSOM_RETURN_IF_ERROR(GetBool(bl, "add_prefix_space", path, &add_prefix_space));
    if (add_prefix_space) {
      return Error(path + ".add_prefix_space", true, "add_prefix_space is not supported");
    }
    // Hugging Face defaults use_regex to true (GPT-2's regex), which we do not implement.
    auto use_regex = bl.find("use_regex");
    if (use_regex == bl.end()) {
      return Missing(path + ".use_regex",
                     "it defaults to true (GPT-2 regex), which is not supported");
    }
    if (!use_regex->is_boolean() || use_regex->get<bool>()) {
      return Error(path + ".use_regex", *use_regex, "only use_regex false is supported");
    }
    return absl::OkStatus();
  }

  absl::Status CheckSplit(const Json& split, const std::string& path) {
    if (TypeOf(split) != "Split") return TypeError(path, split, "expected a Split pre-tokenizer");
    auto pattern = split.find("pattern");
    if (pattern == split.end()) return Missing(path + ".pattern", "expected {\"Regex\": ...}");
    auto regex = pattern->is_object() ? pattern->find("Regex") : pattern->end();
    if (!pattern->is_object() || regex == pattern->end()) {
      return Error(path + ".pattern", *pattern, "only a Regex pattern is supported");
    }
    if (!regex->is_string() || regex->get<std::string>() != kBloomSplitPattern) {
      return Error(
          path + ".pattern.Regex", *regex,
          absl::StrCat("only BLOOM's pattern ", ShowString(kBloomSplitPattern), " is supported"));
    }
    auto behavior = split.find("behavior");
    if (behavior == split.end()) return Missing(path + ".behavior", "expected \"Isolated\"");
    if (!behavior->is_string() || behavior->get<std::string>() != "Isolated") {
      return Error(path + ".behavior", *behavior, "only behavior \"Isolated\" is supported");
    }
    bool invert;
    BLOSSOM_RETURN_IF_ERROR(GetBool(split, "invert", path, &invert));
    if (invert) return Error(path + ".invert", true, "invert true is not supported");
    return absl::OkStatus();
  }

  absl::Status CheckPostProcessor(const Json& pp, const std::string& path) {
    if (pp.is_null()) return absl::OkStatus();
    const std::string type = TypeOf(pp);
    if (type == "ByteLevel") return absl::OkStatus();  // rewrites offsets only
    if (type == "Sequence") {
      auto list = pp.find("processors");
      if (list == pp.end() || !list->is_array()) {
        return Error(path + ".processors", list == pp.end() ? Json() : *list, "expected a list");
      }
      for (size_t i = 0; i < list->size(); ++i) {
        BLOSSOM_RETURN_IF_ERROR(
            CheckPostProcessor((*list)[i], absl::StrCat(path, ".processors[", i, "]")));
      }
      return absl::OkStatus();
    }
    if (type == "TemplateProcessing") {
      auto single = pp.find("single");
      const Json just_a = Json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
      bool ok = single != pp.end() && single->is_array() && single->size() == 1 &&
                (*single)[0].is_object() && (*single)[0].size() == 1 &&
                (*single)[0].contains("Sequence") && (*single)[0]["Sequence"].is_object() &&
                (*single)[0]["Sequence"].value("id", "") == "A";
      if (!ok) {
        return Error(path + ".single", single == pp.end() ? Json() : *single,
                     absl::StrCat("only a template that adds no tokens (", ShowJson(just_a),
                                  ") is supported"));
      }
      return absl::OkStatus();
    }
    return TypeError(
        path, pp, "only null, ByteLevel, or a TemplateProcessing that adds no tokens is supported");
  }

  absl::Status LoadModel(const Json& model, Tokenizer* tok) {
    if (TypeOf(model) != "BPE") return TypeError("model", model, "only the BPE model is supported");
    auto field = [&](const char* key) { return model.find(key); };
    if (auto it = field("dropout"); it != model.end() && !it->is_null()) {
      if (!it->is_number() || it->get<double>() != 0.0) {
        return Error("model.dropout", *it, "BPE dropout is not supported");
      }
    }
    if (auto it = field("byte_fallback"); it != model.end() && !it->is_null()) {
      if (!it->is_boolean() || it->get<bool>()) {
        return Error("model.byte_fallback", *it, "byte_fallback is not supported");
      }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (auto it = field(key); it != model.end() && !it->is_null()) {
        if (!it->is_string() || !it->get<std::string>().empty()) {
          return Error(absl::StrCat("model.", key), *it, "only null or \"\" is supported");
        }
      }
    }
    if (auto it = field("fuse_unk"); it != model.end() && !it->is_null()) {
      if (!it->is_boolean()) return Error("model.fuse_unk", *it, "expected a boolean");
      tok->fuse_unk_ = it->get<bool>();
    }
    if (auto it = field("ignore_merges"); it != model.end() && !it->is_null()) {
      if (!it->is_boolean()) return Error("model.ignore_merges", *it, "expected a boolean");
      tok->ignore_merges_ = it->get<bool>();
    }

    auto vocab = field("vocab");
    if (vocab == model.end()) return Missing("model.vocab", "expected an object token -> id");
    if (!vocab->is_object()) return Error("model.vocab", *vocab, "expected an object token -> id");
    tok->vocab_.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      const Json& id = it.value();
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxId) {
        return Error(absl::StrCat("model.vocab[", ShowString(it.key()), "]"), id,
                     absl::StrCat("expected an integer id in [0, ", kMaxId, "]"));
      }
      tok->vocab_[it.key()] = static_cast<int32_t>(id.get<int64_t>());
    }
    // Hugging Face keeps one arbitrary token per id in its reverse map; refuse the ambiguity.
    {
      absl::flat_hash_map<int32_t, const std::string*> seen;
      for (const auto& kv : tok->vocab_) {
        auto [it, inserted] = seen.emplace(kv.second, &kv.first);
        if (!inserted) {
          return Error(absl::StrCat("model.vocab[", ShowString(kv.first), "]"), kv.second,
                       absl::StrCat("id also used by ", ShowString(*it->second)));
        }
      }
    }

    if (auto it = field("unk_token"); it != model.end() && !it->is_null()) {
      if (!it->is_string()) return Error("model.unk_token", *it, "expected a string or null");
      auto unk = tok->vocab_.find(it->get<std::string>());
      if (unk == tok->vocab_.end()) return Error("model.unk_token", *it, "not in model.vocab");
      tok->unk_id_ = unk->second;
    }

    const ByteLevelTables& tables = ByteLevel();
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      AppendUtf8(tables.byte_to_cp[b], &ch);
      auto it = tok->vocab_.find(ch);
      tok->byte_ids_[b] = it == tok->vocab_.end() ? -1 : it->second;
    }
    return LoadMerges(model, tok);
  }

  // Merges (tokenizers/src/models/bpe/{serialization,model}.rs): [a, b] pairs, or legacy "a b"
  // strings split on the single space with "#version" lines dropped before ranks are counted.
  // A later duplicate of a pair overwrites the earlier rank, as Hugging Face's HashMap collect.
  absl::Status LoadMerges(const Json& model, Tokenizer* tok) {
    auto merges = model.find("merges");
    if (merges == model.end()) return Missing("model.merges", "expected a list of merges");
    if (!merges->is_array()) return Error("model.merges", *merges, "expected a list");
    const bool legacy = !merges->empty() && (*merges)[0].is_string();
    tok->merges_.reserve(merges->size());
    int32_t rank = 0;
    for (size_t i = 0; i < merges->size(); ++i) {
      const Json& m = (*merges)[i];
      const std::string path = absl::StrCat("model.merges[", i, "]");
      std::string a, b;
      if (legacy) {
        if (!m.is_string()) return Error(path, m, "expected an \"a b\" string like merges[0]");
        const std::string line = m.get<std::string>();
        if (line.rfind("#version", 0) == 0) continue;
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          return Error(path, m, "expected exactly two tokens separated by one space");
        }
        a = line.substr(0, space);
        b = line.substr(space + 1);
      } else {
        if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string()) {
          return Error(path, m, "expected a pair of strings like merges[0]");
        }
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      auto ia = tok->vocab_.find(a);
      auto ib = tok->vocab_.find(b);
      auto inew = tok->vocab_.find(a + b);
      const std::string* missing = ia == tok->vocab_.end()   ? &a
                                   : ib == tok->vocab_.end() ? &b
                                                             : nullptr;
      if (missing == nullptr && inew == tok->vocab_.end()) {
        return Error(path, m, absl::StrCat(ShowString(a + b), " is not in model.vocab"));
      }
      if (missing != nullptr) {
        return Error(path, m, absl::StrCat(ShowString(*missing), " is not in model.vocab"));
      }
      const uint64_t key =
          (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
      tok->merges_[key] = Tokenizer::Merge{rank, inew->second};
      ++rank;
    }
    return absl::OkStatus();
  }

  // Added tokens get the id Hugging Face's AddedVocabulary::add_tokens gives them when loading:
  // the model id if the content is in the vocabulary, else the next id from the vocabulary's
  // size (entry count) upwards. A file whose ids disagree would be silently renumbered by
  // Hugging Face (with a warning); we refuse it instead.
  absl::Status LoadAddedTokens(const Json& list, Tokenizer* tok) {
    if (!list.is_array()) return Error("added_tokens", list, "expected a list");
    int64_t next_id = static_cast<int64_t>(tok->vocab_.size());
    absl::flat_hash_map<int32_t, const std::string*> model_tokens;
    for (const auto& kv : tok->vocab_) model_tokens.emplace(kv.second, &kv.first);
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& t = list[i];
      const std::string path = absl::StrCat("added_tokens[", i, "]");
      if (!t.is_object()) return Error(path, t, "expected an object");
      Tokenizer::AddedToken added;
      auto content = t.find("content");
      if (content == t.end()) return Missing(path + ".content", "expected a string");
      if (!content->is_string()) return Error(path + ".content", *content, "expected a string");
      added.content = content->get<std::string>();
      if (added.content.empty()) return Error(path + ".content", *content, "empty content");
      auto id = t.find("id");
      if (id == t.end()) return Missing(path + ".id", "expected an integer");
      if (!id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > kMaxId) {
        return Error(path + ".id", *id, absl::StrCat("expected an integer in [0, ", kMaxId, "]"));
      }
      bool single_word;
      BLOSSOM_RETURN_IF_ERROR(GetBool(t, "single_word", path, &single_word));
      if (single_word) return Error(path + ".single_word", true, "single_word is not supported");
      BLOSSOM_RETURN_IF_ERROR(GetBool(t, "lstrip", path, &added.lstrip));
      BLOSSOM_RETURN_IF_ERROR(GetBool(t, "rstrip", path, &added.rstrip));
      BLOSSOM_RETURN_IF_ERROR(GetBool(t, "normalized", path, &added.normalized));
      BLOSSOM_RETURN_IF_ERROR(GetBool(t, "special", path, &added.special));
      if (tok->added_by_content_.contains(added.content)) {
        return Error(path + ".content", *content, "duplicate added token");
      }
      int64_t expected;
      if (auto it = tok->vocab_.find(added.content); it != tok->vocab_.end()) {
        expected = it->second;
      } else {
        expected = next_id++;
        if (auto clash = model_tokens.find(static_cast<int32_t>(expected));
            clash != model_tokens.end()) {
          return Error(
              path + ".id", *id,
              absl::StrCat("Hugging Face would give this token id ", expected,
                           ", which model.vocab already uses for ", ShowString(*clash->second)));
        }
      }
      if (id->get<int64_t>() != expected) {
        return Error(
            path + ".id", *id,
            absl::StrCat("Hugging Face would give ", ShowString(added.content), " id ", expected,
                         " (the model id of that content, or the next id after "
                         "the model vocabulary)"));
      }
      if (expected > kMaxId) {
        return Error(path + ".id", *id, absl::StrCat("ids above ", kMaxId, " are not supported"));
      }
      added.id = static_cast<int32_t>(expected);
      if (added.special) tok->special_contents_.insert(added.content);
      tok->added_by_content_[added.content] = static_cast<int32_t>(tok->added_.size());
      tok->added_.push_back(std::move(added));
    }
    return absl::OkStatus();
  }

  void BuildIdTables(Tokenizer* tok) {
    int64_t max_id = -1;
    for (const auto& kv : tok->vocab_) max_id = std::max<int64_t>(max_id, kv.second);
    for (const auto& a : tok->added_) max_id = std::max<int64_t>(max_id, a.id);
    const size_t n = static_cast<size_t>(max_id + 1);
    tok->tokens_.assign(n, std::string());
    tok->has_token_.assign(n, false);
    tok->special_.assign(n, false);
    tok->decoded_bytes_.assign(n, std::string());
    for (const auto& kv : tok->vocab_) {
      tok->tokens_[kv.second] = kv.first;
      tok->has_token_[kv.second] = true;
    }
    // Decoding looks added tokens up first (simple_id_to_token before model.id_to_token).
    for (const auto& a : tok->added_) {
      tok->tokens_[a.id] = a.content;
      tok->has_token_[a.id] = true;
    }
    for (size_t id = 0; id < n; ++id) {
      if (!tok->has_token_[id]) continue;
      tok->special_[id] = tok->special_contents_.contains(tok->tokens_[id]);
      tok->decoded_bytes_[id] = ByteLevelDecodeToken(tok->tokens_[id]);
    }
  }

  std::string source_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open tokenizer file"));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return FromJson(contents.str(), path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelDir(const std::string& dir,
                                                                   int64_t model_vocab_size) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = FromFile(dir + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (std::ifstream in(config_path, std::ios::binary); in) {
    std::ostringstream contents;
    contents << in.rdbuf();
    const Json config = Json::parse(contents.str(), nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": expected a JSON object (transformers could not load it)"));
    }
    if (auto it = config.find("add_prefix_space"); it != config.end() && it->is_boolean() &&
                                                   it->get<bool>()) {
      return absl::InvalidArgumentError(absl::StrCat(
          config_path, ": add_prefix_space = true (transformers puts a space before the first "
          "word of every text) is not supported; encoding without it would give other ids than "
          "the model was trained with"));
    }
  }
  if (model_vocab_size > 0 && (*tokenizer)->vocab_size() > model_vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, "/tokenizer.json has ids up to ", (*tokenizer)->vocab_size() - 1,
        ", past the model's ", model_vocab_size,
        " embedding rows (config.json vocab_size): its added tokens were not given rows; resize "
        "the embeddings (transformers' resize_token_embeddings) and save the model again"));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view json,
                                                               absl::string_view source_name) {
  return TokenizerLoader(source_name).Load(json);
}

}  // namespace blossom
