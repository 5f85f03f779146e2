// `blossom-bench serve`: the serving load generator. Connects to a running server (gRPC
// `grpc://host:port` or the HTTP gateway `http://host:port`), builds prompts of the sampled
// lengths with the server's tokenizer, sends one untimed warm-up request, then replays the
// arrival schedule under the concurrency cap and reports vLLM benchmark_serving's metrics as a
// table, JSON, markdown and SVG.
//
// Every request is greedy with ignore_eos, so each produces exactly its sampled output length.
//
// Errors: InvalidArgument for bad settings (checked before connecting); Unavailable when the
// target fails (unreachable, the warm-up request failed) and when no timed request succeeded
// (the table and files are still written, so the failures can be read there).
//
// Thread-safety: runs on the calling thread (the clients use their own threads); not reentrant
// for the same output paths.
#ifndef BLOSSOM_BENCHMARKS_SERVE_COMMAND_H_
#define BLOSSOM_BENCHMARKS_SERVE_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "benchmarks/serve_report.h"

namespace blossom {

struct ServeCommandOptions {
  // target, model, num_requests, request_rate, arrival, burstiness, max_concurrency,
  // prompt/output_len_dist (specs as length_dist parses them), prompt_kind, seed, slo, corpus
  // (a file path) and http_api are read from here. arrival "" = poisson, or gamma when
  // burstiness is not 1; "poisson" with burstiness not 1 is refused.
  ServeSettings settings;
  std::string api_key;
  ServeOutputPaths outputs;
  std::string commit;
  std::string machine;
  std::string command;
  // Each request's whole deadline in seconds, on gRPC and HTTP alike (a request not finished
  // this long after it was sent fails as a timeout); 0 = none; negative is refused.
  double request_timeout_s = 600;
  bool warmup = true;
};

// Progress and the result table go to `log` (may be null).
absl::StatusOr<ServeReport> RunServeCommand(const ServeCommandOptions& options, std::ostream* log);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SERVE_COMMAND_H_
