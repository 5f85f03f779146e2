// A byte-level BPE tokenizer that reads a Hugging Face tokenizer.json and encodes and decodes
// exactly like Hugging Face `tokenizers` for BLOOM-style tokenizers.
//
// The supported subset is what BLOOM uses (see tokenizer_loader.cc for the precise list): no
// normalizer; BLOOM's Split regex (pre_tokenizer.h's matcher) followed by a ByteLevel pre-tokenizer
// without regex, or a plain ByteLevel pre-tokenizer without regex; a BPE model; a ByteLevel
// decoder; a post-processor that adds no tokens; added tokens with lstrip/rstrip/normalized/
// special flags; saved truncation and padding settings are ignored with a warning, as
// transformers ignores them for tokenizer(text). Anything else is refused at load time with
// InvalidArgument naming the JSON path
// and value, because a tokenizer that silently differs from the one the model was trained with
// produces plausible-looking garbage.
#ifndef BLOSSOM_ENGINE_TOKENIZER_TOKENIZER_H_
#define BLOSSOM_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"

namespace blossom {

// Thread-safety: immutable after construction; every const method may be called concurrently
// from any number of threads (there is no cache or other hidden mutable state).
//
// Invariants: ids are in [0, vocab_size()); every id with a token has its decoded bytes
// precomputed; added tokens carry the id Hugging Face would assign them (a tokenizer.json whose
// recorded ids disagree is refused rather than silently renumbered).
class Tokenizer {
 public:
  // Reads and parses a tokenizer.json. NotFound if the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // A model directory's dir/tokenizer.json, checked against what would make it encode or decode
  // otherwise than transformers' AutoTokenizer on that directory: dir/tokenizer_config.json's
  // add_prefix_space: true (BloomTokenizerFast applies it to the pre-tokenizer at load; not
  // supported, InvalidArgument), and, when model_vocab_size > 0, token ids past the model's
  // embedding rows (FailedPrecondition: a request would fail only once it met such a token).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromModelDir(const std::string& dir,
                                                                  int64_t model_vocab_size = 0);
  // Parses tokenizer.json text; `source_name` prefixes error messages (e.g. the path).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(absl::string_view json,
                                                             absl::string_view source_name);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids for `utf8_text`, as Hugging Face's `Tokenizer.encode(text).ids` (the supported
  // post-processors add no special tokens). InvalidArgument naming the byte offset if the text is
  // not well-formed UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view utf8_text) const;

  // Text for `ids`, as Hugging Face's `Tokenizer.decode(ids, skip_special_tokens)`: ids without a
  // token are skipped, invalid UTF-8 becomes U+FFFD per maximal ill-formed subpart.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The raw bytes `id` contributes to Decode before UTF-8 repair; empty for ids without a token
  // and for special tokens when `skip_special_tokens`. For streaming detokenization.
  absl::string_view DecodedBytes(int32_t id, bool skip_special_tokens) const;

  // Added tokens first, then the model vocabulary (Hugging Face's order).
  absl::optional<int32_t> TokenToId(absl::string_view token) const;
  absl::optional<std::string> IdToToken(int32_t id) const;

  // Largest id of the model vocabulary and of the added tokens, plus one.
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  // True if the id's token string is the content of a special added token (Hugging Face decides
  // by content, so a model token spelled like a special token counts too).
  bool IsSpecial(int32_t id) const;
  // Ids of the added tokens flagged special, ascending.
  std::vector<int32_t> SpecialIds() const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool special = false;
  };

  // A byte trie over added-token contents, for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t added_index = -1;                           // index into added_, or -1
    };
    std::vector<Node> nodes;
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() <= 1; }
  };

  // A piece of the input: either an added token (added_index >= 0) or text still to tokenize.
  struct Segment {
    size_t begin;
    size_t end;
    int32_t added_index;
  };

  struct Merge {
    int32_t rank;
    int32_t new_id;
  };

  Tokenizer() = default;

  friend class TokenizerLoader;

  void BuildTrie(bool normalized, Trie* trie) const;
  // Hugging Face's AddedVocabulary::find_matches over text[seg.begin, seg.end), appended to *out.
  void SplitOnAddedTokens(absl::string_view text, const Segment& seg, const Trie& trie,
                          std::vector<Segment>* out) const;
  // BLOOM's Split regex with Isolated behavior: calls BpeWord on every match and gap.
  void PreTokenizeAndBpe(absl::string_view piece, std::vector<int32_t>* ids) const;
  void BpeWord(absl::string_view word, std::vector<int32_t>* ids) const;

  // Model.
  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // key: (left id << 32) | right id
  int32_t byte_ids_[256];                        // model id of each byte's character, or -1
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool split_regex_ = false;  // BLOOM's Split pre-tokenizer present

  // Added tokens, in file order, with their content lookup.
  std::vector<AddedToken> added_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;  // content -> index into added_
  absl::flat_hash_set<std::string> special_contents_;
  Trie non_normalized_trie_;
  Trie normalized_trie_;

  // Per id (size vocab_size()): the token string ("" with has_token_ false for holes), whether it
  // is skipped as special, and the bytes the ByteLevel decoder turns it into.
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
  std::vector<bool> special_;
  std::vector<std::string> decoded_bytes_;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_TOKENIZER_TOKENIZER_H_
