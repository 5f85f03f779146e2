// best_of: several sampled candidates of a prompt, of which the best are returned, ranked as
// TGI and OpenAI rank them: by the mean log-probability of their generated tokens ("the highest
// log probability per token").
#ifndef BLOSSOM_CLIENTS_GATEWAY_BEST_OF_H_
#define BLOSSOM_CLIENTS_GATEWAY_BEST_OF_H_

#include <cstddef>
#include <vector>

#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway {

// The mean logprob of the response's tokens (each must carry one: ask for logprobs >= 0);
// -infinity for a response without tokens (or a NaN among them).
double MeanTokenLogprob(const blossom::v1::GenerateResponse& response);

// The indices of responses[begin, begin + count), best first; equal means keep their order
// (TGI keeps the first of equals).
std::vector<size_t> RankByMeanLogprob(const std::vector<blossom::v1::GenerateResponse>& responses,
                                      size_t begin, size_t count);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_BEST_OF_H_
