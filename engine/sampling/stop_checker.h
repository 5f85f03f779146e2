// Per-request stopping on token ids and on the detokenized text, with stop-string hold-back for
// streaming.
//
// Rules, checked for each generated token n (1-based) in this order; the first that fires wins:
//   0. n < min_new_tokens (fewer than min_new_tokens tokens including this one): rules 1-3 are
//      skipped; n == min_new_tokens: rule 3 is (vLLM V1 checks stop strings only once more than
//      min_tokens tokens exist). EOS and stop tokens cannot normally appear below it, because
//      SuppressedTokens() masks them at sampling; if one is forced anyway it is ordinary text.
//   1. one of the model's end tokens (unless ignore_eos) -> kEosToken. Every id the model lists
//      (config.json's eos_token_id, one or a list, and generation_config.json's: a chat
//      fine-tune's end of turn) is an EOS, as transformers' generate() treats a list
//      eos_token_id, and reports as TGI does ("eos_token"), not as a client's stop token. Its
//      text is emitted only with include_stop_string_in_output (vLLM; the text is empty unless
//      skip_special_tokens is off).
//   2. a stop_token_ids entry -> kStopToken. Its text is emitted only with
//      include_stop_string_in_output (vLLM).
//   3. a stop string completed within this token's text -> kStopString. The output is cut right
//      before the stop string (or right after it with include_stop_string_in_output); anything
//      after it in the same delta is dropped. When several stop strings match, the one that ends
//      first in the text wins, and among those ending at the same byte the longest (the one that
//      starts first), so the result does not depend on how the text was split into tokens. A
//      match may start in text of tokens up to min_new_tokens but must end in this token's text.
//      With stop_at_text_end (TGI's rule) only a match ending at the end of this token's text
//      counts: the output ends with the stop string, or goes on.
//   4. n >= max_new_tokens -> kLength.
// Hence precedence on one token: EOS > stop token > stop string > length (vLLM's order).
//
// Streaming: text that could still become (part of) a stop string is held back, never emitted:
// exactly the longest suffix of the text that is a proper prefix of some stop string (none with
// include_stop_string_in_output, as vLLM: that text is output whether the match completes or
// not). An incomplete
// trailing UTF-8 sequence is held back too and no cut falls inside a character, so each emitted
// chunk is whole characters when the text is valid UTF-8. When Process() returns finished, its
// text includes everything still held (unless the hold-back is the start of the matched stop
// string), so nothing is lost. Flush() is for requests that end for reasons the checker does not
// see (cancellation, an error, the engine's context limit). Invariant: the concatenation of all
// text_to_emit plus Flush() equals the full detokenized text truncated at the first stop match
// (text of EOS and of a stop token left out unless included).
//
// Matching is an Aho-Corasick automaton over the stop strings' bytes, fed each delta once: O(delta)
// per token however long the output grows, and the automaton state is exactly the longest suffix of
// the text that is a prefix of some stop string, which is what hold-back needs.
//
// Not thread-safe; one per request. Not copyable (owns per-request state).
#ifndef BLOSSOM_ENGINE_SAMPLING_STOP_CHECKER_H_
#define BLOSSOM_ENGINE_SAMPLING_STOP_CHECKER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/sampling/sampling_params.h"

namespace blossom {

enum class FinishReason {
  kNone,
  kLength,
  kEosToken,
  kStopToken,
  kStopString,
  // The last three come from the engine, never from StopChecker.
  kCancelled,  // by the client (or its disconnection or deadline)
  kError,      // the model or the engine failed
  // The server ended a healthy request because it shut down (its drain timeout ran out): not
  // a failure, and another server may run it (vLLM's "abort").
  kAborted
};

// "none", "length", "eos_token", "stop_token", "stop_string", "cancelled", "error", "abort".
// Stable: the API and metrics labels use these strings.
const char* FinishReasonName(FinishReason reason);

class StopChecker {
 public:
  struct Result {
    std::string text_to_emit;  // stream this now (may be empty)
    bool finished = false;
    FinishReason reason = FinishReason::kNone;
    std::string matched_stop;  // the stop string, for kStopString
  };

  // params should have passed Validate(); empty stop strings are ignored regardless.
  // end_token_ids: the model's end tokens (BloomConfig::eos_token_ids), empty when it has none.
  StopChecker(const StoppingParams& params, absl::Span<const int32_t> end_token_ids);
  StopChecker(const StopChecker&) = delete;
  StopChecker& operator=(const StopChecker&) = delete;

  // Called once per generated token, in order, with the text that token added to the detokenized
  // output (empty when the detokenizer is still waiting for more bytes). Deltas must be
  // append-only: their concatenation is the detokenized output. After a finished result, further
  // calls return finished again with no text.
  // `completed_before`: text of the tokens before this one that only this token completed (a
  // partial UTF-8 character flushed as U+FFFD because the token ends the output; EndsOn). It is
  // output text whatever the token's own text becomes, and is not matched against stop strings.
  Result Process(int32_t token, absl::string_view text_delta,
                 absl::string_view completed_before = {});

  // Whether `token`, as the next one, ends the output on itself (an end token unless
  // ignore_eos, or a stop token, from min_new_tokens on), so that its own text may be left out.
  bool EndsOn(int32_t token) const;

  // Returns and clears the text held back so far. For ends the checker did not decide.
  std::string Flush();

  // Token ids to suppress when sampling token number num_generated + 1 (num_generated tokens so
  // far): the end tokens (unless ignore_eos) and the stop token ids, each once, while
  // num_generated < min_new_tokens, so that at least min_new_tokens tokens precede any of them.
  // Empty otherwise.
  std::vector<int32_t> SuppressedTokens(int32_t num_generated) const;

  int32_t num_generated() const { return num_generated_; }
  bool finished() const { return reason_ != FinishReason::kNone; }
  FinishReason reason() const { return reason_; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t fail = 0;
    int32_t depth = 0;
    // Longest suffix of this node's string that is a proper prefix of a stop string (a node
    // with children), via the fail chain: what must be held back in this state.
    int32_t hold = 0;
    // Index into stops_ of the longest stop string that is a suffix of this node's string, or -1.
    int32_t match = -1;
  };

  bool IsEndToken(int32_t token) const;
  bool IsStopToken(int32_t token) const;
  int32_t Child(int32_t node, unsigned char byte) const;
  int32_t Step(int32_t node, unsigned char byte) const;
  Result Finish(FinishReason reason, std::string text, std::string matched_stop);

  const StoppingParams params_;
  // The model's end tokens, distinct; empty with ignore_eos, so that none of them ends the
  // output or is suppressed.
  std::vector<int32_t> end_token_ids_;
  std::vector<std::string> stops_;
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty string)
  int32_t state_ = 0;
  std::string held_;  // text received but not yet emitted
  int32_t num_generated_ = 0;
  FinishReason reason_ = FinishReason::kNone;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_STOP_CHECKER_H_
