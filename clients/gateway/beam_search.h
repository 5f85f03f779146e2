// vLLM's beam search on the OpenAI routes: `use_beam_search: true` with `n` beams (vLLM's
// beam_width = n, every beam returned as a choice, best first), `length_penalty` and
// `early_stopping` (true, false or "never", as Hugging Face). Each prompt becomes one call of
// the server's BeamSearch RPC, and its beams are answered as the prompt's n choices.
//
// What beam search does not combine with is refused with a 400 naming the client's field:
// streaming, sampling (temperature other than 0 or 1, top_p, top_k, min_p, typical_p,
// penalties), logit_bias, allowed_token_ids, bad_words, guided and structured outputs, tools,
// stop strings, echo, prompt_logprobs and top_logprobs (a beam's own logprobs are given with
// logprobs).
#ifndef BLOSSOM_CLIENTS_GATEWAY_BEAM_SEARCH_H_
#define BLOSSOM_CLIENTS_GATEWAY_BEAM_SEARCH_H_

#include <vector>

#include "absl/status/status.h"
#include "clients/gateway/openai_api.h"
#include "nlohmann/json.hpp"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway::openai {

// Reads use_beam_search, length_penalty and early_stopping into request->beam_search (after
// the rest of the request is parsed: it checks what beam search cannot take).
absl::Status ParseBeamSearch(const nlohmann::json& body, CompletionRequest* request);

// One BeamSearch call per prompt, in choice order (the prompt of choices k*n to k*n + n - 1),
// each with group_size = prompts x n, the beams the request runs at once.
std::vector<blossom::v1::BeamSearchRequest> BeamSearchCalls(const CompletionRequest& request);

// A call's beams as the GenerateResponses of its n choices, best first (CompletionResponse
// formats them like sampled choices).
std::vector<blossom::v1::GenerateResponse> BeamsAsChoices(
    const blossom::v1::BeamSearchResponse& response);

}  // namespace blossom::gateway::openai

#endif  // BLOSSOM_CLIENTS_GATEWAY_BEAM_SEARCH_H_
