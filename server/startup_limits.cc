#include "server/startup_limits.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace blossom {

absl::Status CheckStartupLimits(const StartupLimits& l) {
  if (l.port < 0 || l.port > 65535) {
    // gRPC would bind the value modulo 65,536: a port nobody asked for.
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535] (0 = a free one), got ", l.port));
  }
  if (l.max_message_bytes < kMinMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes must be >= ", kMinMessageBytes, " (below that no request with a ",
        "prompt fits), got ", l.max_message_bytes));
  }
  if (!(l.drain_timeout_s >= 0.0) || std::isinf(l.drain_timeout_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--drain_timeout must be a finite number of seconds >= 0 (0 = end calls in flight at "
        "once on SIGTERM), got ", l.drain_timeout_s));
  }
  if (l.max_total_tokens != 0 && l.max_total_tokens < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_total_tokens must be 0 (the default, fitted to the KV cache) or >= 2 (a prompt "
        "token and a generated one), got ", l.max_total_tokens));
  }
  if (l.max_input_tokens < 0) {
    return absl::InvalidArgumentError(
        "--max_input_tokens must be >= 1, or 0 for max_total_tokens - 1");
  }
  // Both given: a prompt the flag admits must leave room for a new token.
  if (l.max_total_tokens != 0 && l.max_input_tokens >= l.max_total_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_input_tokens (", l.max_input_tokens, ") must be less than --max_total_tokens (",
        l.max_total_tokens, "): a prompt that long leaves no room for a new token"));
  }
  if (l.speculative_max_running < 0) {
    return absl::InvalidArgumentError("--speculative_max_running must be >= 0");
  }
  for (const auto& [flag, value] :
       {std::tuple{"max_prompt_logprob_rows", l.max_prompt_logprob_rows},
        std::tuple{"max_waiting_requests", l.max_waiting_requests},
        std::tuple{"max_batch_size", l.max_batch_size},
        std::tuple{"max_batched_tokens", l.max_batched_tokens},
        std::tuple{"block_size", l.block_size}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be >= 1, got ", value));
    }
  }
  return absl::OkStatus();
}

int32_t ResolveMaxTotalTokens(int32_t given) {
  return given != 0 ? given : kDefaultMaxTotalTokens;
}

int32_t ResolveMaxInputTokens(int32_t given, int32_t max_total_tokens) {
  const int32_t longest = std::max(1, max_total_tokens - 1);
  return given > 0 ? std::min(given, longest) : longest;
}

}  // namespace blossom
