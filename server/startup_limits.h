// blossom-server's limit flags checked and resolved before the model loads: values with which
// no request could ever be served are refused in a second rather than after minutes of loading
// (or found by the clients: a queue of 0 refuses every generation as "full", for clients to
// retry forever), and the token caps' defaults resolved. Pure functions of the values given.
#ifndef BLOSSOM_SERVER_STARTUP_LIMITS_H_
#define BLOSSOM_SERVER_STARTUP_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace blossom {

// The smallest --max_message_bytes: a Generate request with a short text prompt and the
// sampling and stopping fields it may carry is a few hundred bytes.
inline constexpr int32_t kMinMessageBytes = 1024;
// --max_total_tokens's default before kv_fit lowers it to what the KV cache holds.
inline constexpr int32_t kDefaultMaxTotalTokens = 2048;

// The flags' values as given (0 for the token caps: their defaults).
struct StartupLimits {
  int32_t port = 8033;
  int32_t max_message_bytes = 1 << 20;
  double drain_timeout_s = 30.0;
  int32_t max_total_tokens = 0;
  int32_t max_input_tokens = 0;
  int32_t speculative_max_running = 4;
  int32_t max_prompt_logprob_rows = 256;
  int32_t max_waiting_requests = 1024;
  int32_t max_batch_size = 256;
  int32_t max_batched_tokens = 2048;
  int32_t block_size = 16;
};

// InvalidArgument naming the flag: a --port outside [0, 65535] (gRPC would bind it modulo
// 65,536), --max_message_bytes under kMinMessageBytes, a negative or non-finite
// --drain_timeout, --max_total_tokens under 2 (0 = default), a negative --max_input_tokens or
// one not under a given --max_total_tokens, a negative --speculative_max_running, and queue,
// batch, block and prompt-logprob limits under 1.
absl::Status CheckStartupLimits(const StartupLimits& limits);

// --max_total_tokens with its default (0) resolved.
int32_t ResolveMaxTotalTokens(int32_t given);
// --max_input_tokens (`given`, 0 = default) resolved against the cap in force: a prompt must
// leave room for one new token, so it is at most max_total_tokens - 1 (and at least 1).
int32_t ResolveMaxInputTokens(int32_t given, int32_t max_total_tokens);

}  // namespace blossom

#endif  // BLOSSOM_SERVER_STARTUP_LIMITS_H_
