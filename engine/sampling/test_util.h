// Test-only helpers for the sampling tests: a slow reference implementation of steps 1-8 of
// sampler.h, and random logits rows and token histories. Shared by logits_processors_test, which
// compares SamplingDistribution() with the reference, and sampler_test, which checks that Sample()
// draws tokens with the reference's frequencies.
#ifndef BLOSSOM_ENGINE_SAMPLING_TEST_UTIL_H_
#define BLOSSOM_ENGINE_SAMPLING_TEST_UTIL_H_

#include <cstdint>
#include <set>
#include <vector>

#include "engine/sampling/logits_processors.h"
#include "engine/sampling/sampling_params.h"

namespace blossom {

// Reference implementation: full sorts and explicit loops, written straight from the processing
// order documented in sampler.h (HF warpers / vLLM), with no attempt at speed. Steps 1-3 and the
// scaled logit x = (l - max) / T are computed in fp32 as the sampler specifies them (it orders
// tokens by that fp32 x, ties by id); probabilities and every cumulative sum are in double.
//
// The sampler computes weights with an fp32 exp (relative error ~1e-7), so a decision that
// depends on the probability mass to within kMassEps (1e-6, test_util.cc) cannot be pinned down by
// a double-precision reference. Such tokens are reported as `borderline`: their membership is not
// compared (and is counted, so that a test can check that this stays rare).
struct Reference {
  std::vector<TokenProbability> probs;  // survivors by id; empty when every token is masked
  std::set<int32_t> borderline;
};

// The distribution of steps 1-8 for `raw` with these parameters and token history
// (end_token: SamplingContext::end_token).
Reference ReferenceDistribution(const std::vector<float>& raw, const SamplingParams& p,
                                const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& output,
                                const std::vector<int32_t>& suppressed, int32_t end_token = -1);

// Logit generators.
enum class LogitKind { kNormal, kPeaked, kQuantized, kWithMasked };

// A row of `vocab` logits of the given kind; the same seed gives the same row.
std::vector<float> RandomLogits(int32_t vocab, LogitKind kind, uint32_t seed);

// `count` token ids in [0, min(vocab, 31)), so that tokens repeat.
std::vector<int32_t> RandomTokens(int32_t vocab, int count, uint32_t seed);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_TEST_UTIL_H_
