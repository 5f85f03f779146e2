#include "benchmarks/synthetic_prompts.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace blossom {
namespace {

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Largest piece of the corpus sent in one Tokenize call: a token holds at least one byte, so a
// piece stays within any server's tokenize limit of 1,000 tokens or more (Blossom's is 65,536;
// TGI's is its max_input_tokens); a server that refuses it (OUT_OF_RANGE) gets halves.
constexpr size_t kPieceBytes = 1000;
constexpr size_t kMinPieceBytes = 64;

// End of the piece of `text` that starts at `begin` and has at most `max_bytes` bytes: just
// before the last space inside it (a pre-token boundary of byte-level BPE, so the pieces
// tokenize as the whole text would), else at a UTF-8 character boundary.
size_t PieceEnd(const std::string& text, size_t begin, size_t max_bytes) {
  size_t end = std::min(text.size(), begin + max_bytes);
  if (end == text.size()) return end;
  const size_t space = text.rfind(' ', end);
  if (space != std::string::npos && space > begin) return space;
  while (end > begin + 1 && IsContinuationByte(text[end])) --end;
  return end;
}

// `text` tokenized through the server piece by piece (a server refuses a text longer than its
// max_input_tokens; the default corpus is ~50k tokens), each piece's spans shifted to offsets in
// `text`; spans are left empty if any piece came back without them.
absl::StatusOr<Tokenized> TokenizeInPieces(LoadClient& tokenizer, const std::string& text,
                                           int64_t* calls) {
  Tokenized all;
  bool spans_ok = true;
  size_t piece = kPieceBytes;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = PieceEnd(text, begin, piece);
    absl::StatusOr<Tokenized> part = tokenizer.Tokenize(text.substr(begin, end - begin));
    ++*calls;
    if (!part.ok()) {
      if (part.status().code() == absl::StatusCode::kOutOfRange && piece / 2 >= kMinPieceBytes) {
        piece /= 2;  // the server's limit is below kPieceBytes tokens
        continue;
      }
      return part.status();
    }
    spans_ok = spans_ok && part->spans.size() == part->ids.size();
    all.ids.insert(all.ids.end(), part->ids.begin(), part->ids.end());
    if (spans_ok) {
      for (const auto& [a, b] : part->spans) {
        all.spans.emplace_back(a + static_cast<int32_t>(begin), b + static_cast<int32_t>(begin));
      }
    }
    begin = end;
  }
  if (!spans_ok) all.spans.clear();
  return all;
}

}  // namespace

std::string NormalizeCorpus(const std::string& raw) {
  std::vector<absl::string_view> words =
      absl::StrSplit(raw, absl::ByAnyChar(" \t\r\n\f\v"), absl::SkipEmpty());
  return absl::StrJoin(words, " ");
}

absl::StatusOr<PromptSet> BuildPrompts(LoadClient& tokenizer, const std::string& corpus,
                                       const std::vector<int32_t>& lengths, bool token_ids,
                                       uint64_t seed) {
  if (corpus.empty()) return absl::InvalidArgumentError("the prompt corpus is empty");
  PromptSet set;
  int32_t longest = 1;
  for (int32_t l : lengths) longest = std::max(longest, l);

  std::string text = corpus;
  absl::StatusOr<Tokenized> tokens = TokenizeInPieces(tokenizer, text, &set.tokenize_calls);
  if (!tokens.ok()) return tokens.status();
  if (tokens->ids.empty()) return absl::InternalError("the corpus tokenized to nothing");
  if (static_cast<int64_t>(tokens->ids.size()) <= longest) {
    const size_t copies = static_cast<size_t>(longest) / tokens->ids.size() + 2;
    std::vector<std::string> parts(copies, corpus);
    text = absl::StrJoin(parts, " ");
    tokens = TokenizeInPieces(tokenizer, text, &set.tokenize_calls);
    if (!tokens.ok()) return tokens.status();
  }
  const int64_t n = static_cast<int64_t>(tokens->ids.size());
  set.corpus_tokens = n;
  if (n <= longest) return absl::InternalError("the repeated corpus is still too short");
  if (!token_ids && tokens->spans.size() != tokens->ids.size()) {
    return absl::FailedPreconditionError(
        "the server's Tokenize gave no byte offsets, so text prompts cannot be cut to length; "
        "use --prompt-kind ids (gRPC)");
  }
  const auto& spans = tokens->spans;
  // Token j may start a prompt / token j-1 may end one without splitting a UTF-8 character.
  auto start_ok = [&](int64_t j) {
    const size_t b = static_cast<size_t>(spans[j].first);
    return b < text.size() && !IsContinuationByte(text[b]);
  };
  auto end_ok = [&](int64_t e) {  // prompt = tokens [s, e)
    const size_t b = static_cast<size_t>(spans[e - 1].second);
    return b >= text.size() || !IsContinuationByte(text[b]);
  };

  std::mt19937_64 rng(seed);
  for (int32_t length : lengths) {
    LoadRequest request;
    int64_t s = std::uniform_int_distribution<int64_t>(0, n - length)(rng);
    if (token_ids) {
      request.token_ids.assign(tokens->ids.begin() + s, tokens->ids.begin() + s + length);
      request.prompt_tokens = length;
      ++set.exact;
      set.requests.push_back(std::move(request));
      continue;
    }
    int best_count = -1;
    std::string best_text;
    // A stretch of multi-byte text can leave no UTF-8-safe cut near the target; then another
    // start is drawn.
    for (int attempt = 0; attempt < 8 && best_count < 0; ++attempt) {
      if (attempt > 0) s = std::uniform_int_distribution<int64_t>(0, n - length)(rng);
      while (s > 0 && !start_ok(s)) --s;
      // Ends to try, nearest the target first (L, L+1, L-1, ...); at most 7 are tokenized.
      int tried = 0;
      for (int k = 0; k <= 32 && tried < 7; ++k) {
        const int d = (k % 2 == 1) ? (k + 1) / 2 : -(k / 2);
        const int64_t e = s + length + d;
        if (e <= s || e > n || !end_ok(e)) continue;
        ++tried;
        std::string candidate =
            text.substr(static_cast<size_t>(spans[s].first),
                        static_cast<size_t>(spans[e - 1].second - spans[s].first));
        absl::StatusOr<Tokenized> check = tokenizer.Tokenize(candidate);
        ++set.tokenize_calls;
        if (!check.ok()) return check.status();
        const int count = static_cast<int>(check->ids.size());
        if (best_count < 0 || std::abs(count - length) < std::abs(best_count - length)) {
          best_count = count;
          best_text = std::move(candidate);
        }
        if (count == length) break;
      }
    }
    if (best_count < 0) {
      return absl::InternalError(absl::StrCat("no UTF-8-safe cut found for a ", length,
                                              "-token prompt"));
    }
    if (best_count == length) ++set.exact;
    request.text = std::move(best_text);
    request.prompt_tokens = best_count;
    set.requests.push_back(std::move(request));
  }
  return set;
}

}  // namespace blossom
