// Whether one request of --max_total_tokens fits the KV cache the server sized, decided at start.
//
// A request of prompt + max_new_tokens needs that many tokens of KV; one larger than the whole
// pool can never run, so the engine refuses it (400). With a limit the pool cannot hold, every
// chat request without max_tokens (which asks for the whole context, as OpenAI's does) would be
// refused. vLLM and TGI refuse to start then; here a limit the operator gave is refused the same
// way (naming both flags), and the default limit is lowered to what the pool holds, with a
// warning, so that the defaults always serve.
#ifndef BLOSSOM_SERVER_KV_FIT_H_
#define BLOSSOM_SERVER_KV_FIT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace blossom {

struct KvFit {
  int32_t max_total_tokens = 0;  // the limit to serve with
  int64_t pool_tokens = 0;       // tokens the KV pool holds
  std::string warning;           // non-empty when the default limit was lowered
};

// `kv_cache_bytes` as the engine will size its pool (whole blocks of `bytes_per_block`, each of
// `block_size` tokens). InvalidArgument when the pool holds no block, or holds fewer than
// `max_total_tokens` tokens and `limit_given` (the operator set --max_total_tokens);
// `budget_flag` names the flag that sized the pool (--kv_cache_mb, --gpu_memory_fraction).
absl::StatusOr<KvFit> FitMaxTotalTokens(int64_t kv_cache_bytes, size_t bytes_per_block,
                                        int32_t block_size, int32_t max_total_tokens,
                                        bool limit_given, const std::string& budget_flag);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_KV_FIT_H_
