// Test support: several outputs generated at once through one shared constraint, as a batch's
// requests are, against a fresh constraint (nothing cached) for every call.
#ifndef BLOSSOM_ENGINE_GUIDED_INTERLEAVED_WALKS_H_
#define BLOSSOM_ENGINE_GUIDED_INTERLEAVED_WALKS_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/sampling/token_constraint.h"

namespace blossom {

// Grows `outputs` outputs by random allowed tokens of the fixture vocabulary, taking turns at
// random, for `steps` calls in all; now and then a call asks about a shorter prefix of an output
// (a retried step) or an output forks from another's prefix. Every mask `shared` gives must be
// the mask `fresh()` gives for the same output: what a constraint's caches keep (masks, where
// reading left off) must never change what it allows. Reports failures with gtest.
void ExpectInterleavedCallsMatchFresh(
    const TokenConstraint& shared,
    const std::function<std::shared_ptr<const TokenConstraint>()>& fresh, int outputs, int steps,
    uint32_t seed);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_INTERLEAVED_WALKS_H_
