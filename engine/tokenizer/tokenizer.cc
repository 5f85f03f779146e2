// Encoding and decoding for tokenizer.h. Loading, and the tokenizer.json subset it accepts, are
// in tokenizer_loader.cc; the Split regex and the ByteLevel map in pre_tokenizer.h.
//
// Every algorithm below mirrors a specific piece of huggingface/tokenizers (named in comments) so
// that ids match exactly, including the corner cases of its implementation.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "engine/text/utf8.h"
#include "engine/tokenizer/pre_tokenizer.h"

namespace blossom {
namespace {

// Start of the char that ends just before `pos` (pos > 0) in valid UTF-8.
size_t PrevCharStart(absl::string_view s, size_t pos) {
  --pos;
  while (pos > 0 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

}  // namespace

void Tokenizer::BuildTrie(bool normalized, Trie* trie) const {
  trie->nodes.assign(1, Trie::Node());
  for (size_t i = 0; i < added_.size(); ++i) {
    if (added_[i].normalized != normalized) continue;
    int32_t node = 0;
    for (char ch : added_[i].content) {
      const auto byte = static_cast<uint8_t>(ch);
      auto& children = trie->nodes[node].children;
      auto it =
          std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
      if (it != children.end() && it->first == byte) {
        node = it->second;
      } else {
        const auto child = static_cast<int32_t>(trie->nodes.size());
        children.insert(it, {byte, child});
        trie->nodes.emplace_back();  // invalidates `children`; not used after this
        node = child;
      }
    }
    trie->nodes[node].added_index = static_cast<int32_t>(i);
    trie->first_byte[static_cast<uint8_t>(added_[i].content[0])] = true;
  }
}

// AddedVocabulary::find_matches: leftmost-longest, non-overlapping matches (daachorse
// LeftmostLongest), then lstrip/rstrip widen the match over Unicode whitespace. Like Hugging Face,
// the scan resumes at the end of the raw match, not of the rstrip-widened one.
void Tokenizer::SplitOnAddedTokens(absl::string_view text, const Segment& seg, const Trie& trie,
                                   std::vector<Segment>* out) const {
  const absl::string_view sentence = text.substr(seg.begin, seg.end - seg.begin);
  size_t start_offset = 0;
  size_t i = 0;
  while (i < sentence.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(sentence[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < sentence.size(); ++j) {
      const auto& children = trie.nodes[node].children;
      const auto byte = static_cast<uint8_t>(sentence[j]);
      auto it =
          std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
      if (it == children.end() || it->first != byte) break;
      node = it->second;
      if (trie.nodes[node].added_index >= 0) {
        best = trie.nodes[node].added_index;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& added = added_[best];
    size_t start = i, stop = best_end;
    i = best_end;
    if (added.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        const size_t prev = PrevCharStart(sentence, new_start);
        size_t len;
        if (!IsWhiteSpace(DecodeUtf8At(sentence, prev, &len))) break;
        new_start = prev;
      }
      start = std::max(new_start, start_offset);
    }
    if (added.rstrip) {
      while (stop < sentence.size()) {
        size_t len;
        if (!IsWhiteSpace(DecodeUtf8At(sentence, stop, &len))) break;
        stop += len;
      }
    }
    if (start_offset < start) out->push_back({seg.begin + start_offset, seg.begin + start, -1});
    out->push_back({seg.begin + start, seg.begin + stop, best});
    start_offset = stop;
  }
  if (start_offset != sentence.size()) {
    out->push_back({seg.begin + start_offset, seg.end, -1});
  }
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text) const {
  const size_t bad = FindInvalidUtf8(text);
  if (bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "text is not valid UTF-8: ill-formed sequence at byte offset %d (byte 0x%02X)", bad,
        static_cast<uint8_t>(text[bad])));
  }
  // AddedVocabulary::extract_and_normalize: non-normalized added tokens are split out of the raw
  // text first, then normalized ones out of what is left (the normalizer is the identity here).
  std::vector<Segment> segments = {{0, text.size(), -1}};
  std::vector<Segment> next;
  for (const Trie* trie : {&non_normalized_trie_, &normalized_trie_}) {
    if (trie->empty()) continue;
    next.clear();
    for (const Segment& seg : segments) {
      if (seg.added_index >= 0 || seg.begin == seg.end) {
        next.push_back(seg);
      } else {
        SplitOnAddedTokens(text, seg, *trie, &next);
      }
    }
    segments.swap(next);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for (const Segment& seg : segments) {
    if (seg.added_index >= 0) {
      ids.push_back(added_[seg.added_index].id);
    } else {
      PreTokenizeAndBpe(text.substr(seg.begin, seg.end - seg.begin), &ids);
    }
  }
  return ids;
}
// Split{BLOOM's regex, Isolated} (pre_tokenizer.h) unless the pre-tokenizer is a plain ByteLevel;
// BPE on every word.
void Tokenizer::PreTokenizeAndBpe(absl::string_view piece, std::vector<int32_t>* ids) const {
  if (!split_regex_) {
    BpeWord(piece, ids);
    return;
  }
  SplitBloomWords(piece, [&](absl::string_view word) { BpeWord(word, ids); });
}

// BPE::merge_word + Word::merge_all (tokenizers/src/models/bpe/{model,word}.rs): one symbol per
// byte (ByteLevel turned each byte into one vocabulary character), unknown bytes become unk (or are
// dropped when there is no unk token), then a min-heap on (rank, position) merges; a popped entry
// is stale unless the pair now at that position still merges into the same new id.
void Tokenizer::BpeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    std::string chars;
    for (char ch : word) AppendUtf8(ByteLevel().byte_to_cp[static_cast<uint8_t>(ch)], &chars);
    if (auto it = vocab_.find(chars); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> sym;
  sym.reserve(word.size());
  bool pending_unk = false;
  for (char ch : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(ch)];
    if (id >= 0) {
      if (pending_unk) sym.push_back(unk_id_);
      pending_unk = false;
      sym.push_back(id);
    } else if (unk_id_ >= 0) {
      if (pending_unk && !fuse_unk_) sym.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) sym.push_back(unk_id_);
  const int n = static_cast<int>(sym.size());
  if (n <= 1 || merges_.empty()) {
    ids->insert(ids->end(), sym.begin(), sym.end());
    return;
  }

  struct Entry {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  // std heap functions build a max-heap; invert so the smallest (rank, pos) is on top.
  auto later = [](const Entry& x, const Entry& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  auto lookup = [&](int32_t a, int32_t b) -> const Merge* {
    auto it = merges_.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> removed(n, false);
  std::vector<Entry> heap;
  heap.reserve(n);
  for (int k = 0; k < n; ++k) {
    prev[k] = k - 1;
    next[k] = k + 1 < n ? k + 1 : -1;
    if (k + 1 < n) {
      if (const Merge* m = lookup(sym[k], sym[k + 1])) heap.push_back({m->rank, k, m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Entry top = heap.back();
    heap.pop_back();
    if (removed[top.pos] || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    const Merge* current = lookup(sym[top.pos], sym[right]);
    if (current == nullptr || current->new_id != top.new_id) continue;
    sym[top.pos] = top.new_id;
    removed[right] = true;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) {
      if (const Merge* m = lookup(sym[prev[top.pos]], sym[top.pos])) {
        heap.push_back({m->rank, prev[top.pos], m->new_id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (next[top.pos] >= 0) {
      if (const Merge* m = lookup(sym[top.pos], sym[next[top.pos]])) {
        heap.push_back({m->rank, top.pos, m->new_id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }
  for (int k = 0; k < n; ++k) {
    if (!removed[k]) ids->push_back(sym[k]);
  }
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    const absl::string_view piece = DecodedBytes(id, skip_special_tokens);
    bytes.append(piece.data(), piece.size());
  }
  return Utf8Lossy(bytes);
}

absl::string_view Tokenizer::DecodedBytes(int32_t id, bool skip_special_tokens) const {
  if (id < 0 || id >= vocab_size() || !has_token_[id]) return {};
  if (skip_special_tokens && special_[id]) return {};
  return decoded_bytes_[id];
}

absl::optional<int32_t> Tokenizer::TokenToId(absl::string_view token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) {
    return added_[it->second].id;
  }
  if (auto it = vocab_.find(token); it != vocab_.end()) return it->second;
  return absl::nullopt;
}

absl::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !has_token_[id]) return absl::nullopt;
  return tokens_[id];
}

bool Tokenizer::IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

std::vector<int32_t> Tokenizer::SpecialIds() const {
  std::vector<int32_t> ids;
  for (const AddedToken& a : added_) {
    if (a.special) ids.push_back(a.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace blossom

