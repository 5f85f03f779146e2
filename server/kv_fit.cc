#include "server/kv_fit.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/scheduler/block_manager.h"

namespace blossom {

absl::StatusOr<KvFit> FitMaxTotalTokens(int64_t kv_cache_bytes, size_t bytes_per_block,
                                        int32_t block_size, int32_t max_total_tokens,
                                        bool limit_given, const std::string& budget_flag) {
  if (bytes_per_block == 0 || block_size <= 0) {
    return absl::InvalidArgumentError("the KV block size must be positive");
  }
  const int64_t blocks = BlocksInBudget(kv_cache_bytes, bytes_per_block);  // the engine's pool
  KvFit fit;
  fit.pool_tokens = blocks * block_size;
  fit.max_total_tokens = max_total_tokens;
  if (fit.pool_tokens >= max_total_tokens) return fit;
  const std::string sizes =
      absl::StrCat("the KV cache holds ", fit.pool_tokens, " tokens (", kv_cache_bytes,
                   " bytes from ", budget_flag, ", ", bytes_per_block / block_size,
                   " bytes per token)");
  if (blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(sizes, ": not one block of ", block_size, " tokens; raise ", budget_flag));
  }
  if (limit_given) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_total_tokens ", max_total_tokens, " does not fit: ", sizes,
        ", so a request that long could never run; raise ", budget_flag,
        " or lower --max_total_tokens to at most ", fit.pool_tokens));
  }
  fit.max_total_tokens = static_cast<int32_t>(std::min<int64_t>(fit.pool_tokens, max_total_tokens));
  fit.warning = absl::StrCat(sizes, ", fewer than the default --max_total_tokens ",
                             max_total_tokens, ": serving prompt + max_new_tokens up to ",
                             fit.max_total_tokens, " (raise ", budget_flag, " for more)");
  return fit;
}

}  // namespace blossom
