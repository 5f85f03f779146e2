// A constraint on a request's output beyond a fixed set of masks: a grammar the output must
// follow (structured output, engine/guided). At each step it names the tokens that may come next
// given the output so far; the logits processors mask every other token (step 1 of sampler.h).
#ifndef BLOSSOM_ENGINE_SAMPLING_TOKEN_CONSTRAINT_H_
#define BLOSSOM_ENGINE_SAMPLING_TOKEN_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace blossom {

// Bit t of word t / 64 set = token t allowed. Ids past the last word are not allowed.
using TokenBitmask = std::vector<uint64_t>;

inline bool TokenAllowed(const TokenBitmask& mask, int32_t token) {
  const size_t word = static_cast<size_t>(token) / 64;
  return token >= 0 && word < mask.size() && ((mask[word] >> (token % 64)) & 1u) != 0;
}

// Stateless in the output: the allowed set is a function of the output tokens so far (so that
// speculative rounds, retries and preemption need no state kept in step with the output).
// Implementations are immutable after construction apart from internal caches, and
// thread-safe: one constraint may serve several requests on several sampling threads.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // The tokens allowed after `output`. `end_token` (EOS; -1 for none) is allowed exactly where
  // the output is complete. FailedPrecondition when `output` itself breaks the constraint (it
  // can only hold tokens this method allowed, so that is a bug upstream).
  virtual absl::StatusOr<std::shared_ptr<const TokenBitmask>> AllowedTokens(
      absl::Span<const int32_t> output, int32_t end_token) const = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_TOKEN_CONSTRAINT_H_
