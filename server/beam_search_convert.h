// blossom.v1 BeamSearch <-> the engine's beam search (engine/serving/beam_search).
//
// The prompt, the stopping parameters and the API limits go through ToEngineRequest, as for
// Generate, so a beam search is refused exactly where a generation would be; the beam fields
// are checked here, each refusal naming its blossom.v1 field. group_size is checked against
// the waiting queue as GenerateRequest's (CheckGroupSize), and must cover beam_width when set.
#ifndef BLOSSOM_SERVER_BEAM_SEARCH_CONVERT_H_
#define BLOSSOM_SERVER_BEAM_SEARCH_CONVERT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/serving/beam_search.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/blossom/v1/blossom.pb.h"
#include "server/request_convert.h"

namespace blossom {

struct ConvertedBeamSearch {
  BeamSearchRequest search;
  // The prompt and stopping as a generation would have them (to attribute an engine refusal
  // with DescribeEngineRefusal, and for the response's text rules).
  EngineRequest as_generation;
};

// End tokens: the model's (`end_token_ids`, each an EOS) unless stopping.ignore_eos, then
// stopping.stop_token_ids, each once.
absl::StatusOr<ConvertedBeamSearch> ToBeamSearch(const v1::BeamSearchRequest& request,
                                                 const Tokenizer& tokenizer,
                                                 const RequestLimits& limits,
                                                 absl::Span<const int32_t> end_token_ids,
                                                 int32_t vocab_size);

// The beams of a successful outcome, best first: text (skip_special_tokens; the end token's
// text only with include_stop_in_output), tokens (logprobs when asked), score, cumulative
// logprob and finish reason (EOS_TOKEN for any of the model's `end_token_ids` unless
// ignore_eos, as a generation reports it; STOP_TOKEN for a stop token); usage, steps and time.
// request_id and the fingerprint are the caller's.
void FillBeamSearchResponse(const BeamSearchOutcome& outcome, const v1::BeamSearchRequest& request,
                            const ConvertedBeamSearch& converted,
                            absl::Span<const int32_t> end_token_ids, const Tokenizer& tokenizer,
                            v1::BeamSearchResponse* out);

// The wire request as the GenerateRequest that ToEngineRequest checks: the prompt, stopping,
// model, request id, priority and truncation (greedy, no sampling fields).
v1::GenerateRequest AsGenerateRequest(const v1::BeamSearchRequest& request);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_BEAM_SEARCH_CONVERT_H_
