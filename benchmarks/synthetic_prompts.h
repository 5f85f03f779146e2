// Prompts of given token lengths for the serving benchmark, cut from a corpus (by default
// tests/fixtures/corpus.txt: its words joined by single spaces) using the *server's* tokenizer,
// so lengths are right for whatever model is served and no tokenizer is needed here.
//
//   text prompts (default; the only kind over HTTP): the corpus is tokenized once (repeated
//     until it has more tokens than the longest prompt), in pieces of at most 1000 bytes cut
//     before a space (a server refuses texts over its max_input_tokens; halved on OUT_OF_RANGE); prompt i is the text of tokens
//     [s, s + L) from a seeded random start s, cut only at UTF-8 character boundaries, then
//     re-tokenized to check its length (BPE may merge differently at the cut): up to 7 safe
//     ends nearest L are tried until one gives exactly L tokens, else the closest is kept and
//     its real length recorded. So: 1 + N (+ retries) Tokenize calls, before the clock starts.
//   token-id prompts (gRPC `token_ids`): ids [s, s + L) of the same tokenization; always exact.
// Random starts keep prompts from sharing prefixes (which a prefix cache would make unfairly
// cheap).
//
// Thread-safety: BuildPrompts calls the client's Tokenize from the calling thread only.
#ifndef BLOSSOM_BENCHMARKS_SYNTHETIC_PROMPTS_H_
#define BLOSSOM_BENCHMARKS_SYNTHETIC_PROMPTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmarks/load_client.h"

namespace blossom {

struct PromptSet {
  // One per requested length, in order: text or token_ids set, prompt_tokens = the real length.
  std::vector<LoadRequest> requests;
  int64_t exact = 0;           // prompts whose real length equals the target
  int64_t tokenize_calls = 0;
  int64_t corpus_tokens = 0;   // tokens in the (repeated) corpus text
};

// Whitespace-separated words of `raw`, joined by single spaces.
std::string NormalizeCorpus(const std::string& raw);

absl::StatusOr<PromptSet> BuildPrompts(LoadClient& tokenizer, const std::string& corpus,
                                       const std::vector<int32_t>& lengths, bool token_ids,
                                       uint64_t seed);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SYNTHETIC_PROMPTS_H_
