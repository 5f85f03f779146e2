// What the serving benchmark measures per request, and the summary vLLM's benchmark_serving
// prints from it: request and token throughput, TTFT, TPOT, ITL and E2E latency (mean, median,
// p90, p99, std, min, max), goodput under latency objectives, and failures by reason.
//
// Definitions (vLLM's, so numbers compare):
//   TTFT = first token received - request sent
//   TPOT = (E2E - TTFT) / (output tokens - 1), only for requests with >= 2 output tokens
//   ITL  = every gap between successive token arrivals of a request, all requests pooled
//   E2E  = last byte received - request sent
//   duration = benchmark start -> last request finished
//   throughputs = completed requests (or their tokens) / duration
//   goodput = completed requests meeting every objective given / duration (a request with one
//             output token has TPOT 0 for this purpose, as in vLLM)
// Percentiles interpolate linearly between order statistics (numpy's default); std is the
// population standard deviation (numpy's default ddof=0). Only successful requests count.
//
// Pure functions over plain values; thread-safe.
#ifndef BLOSSOM_BENCHMARKS_SERVING_STATS_H_
#define BLOSSOM_BENCHMARKS_SERVING_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace blossom {

// One request as the load generator saw it. Times are seconds since the benchmark start.
struct RequestRecord {
  int index = 0;
  double scheduled_s = 0;    // when the arrival schedule released it
  double send_s = 0;         // when it was sent (later than scheduled if the concurrency cap held it)
  double first_token_s = -1;  // -1: no token arrived
  double end_s = 0;
  std::vector<double> token_times_s;  // arrival of each message that carried tokens
  int32_t prompt_tokens = 0;          // as the server reported it (else as the client built it)
  int32_t output_tokens = 0;          // as the server reported it (else as counted)
  int32_t expected_output_tokens = 0;  // max_new_tokens asked for (with ignore_eos: exact)
  bool success = false;
  std::string error;  // "" on success; else a short reason such as "grpc UNAVAILABLE: ..."
};

struct Distribution {
  int64_t count = 0;
  double mean = 0, median = 0, p90 = 0, p99 = 0, std = 0, min = 0, max = 0;
};

// Percentile p in [0, 100] of `values` (any order); 0 for an empty list.
double Percentile(std::vector<double> values, double p);
Distribution Summarize(const std::vector<double>& values);

// Latency objectives in milliseconds; <= 0 = not set.
struct Slo {
  double ttft_ms = 0, tpot_ms = 0, e2e_ms = 0;
  bool any() const { return ttft_ms > 0 || tpot_ms > 0 || e2e_ms > 0; }
};

struct ServingSummary {
  int64_t requests = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> failures;  // reason (error text up to the first ':') -> count
  // Completed requests whose output token count differs from what was asked.
  int64_t output_length_mismatches = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;       // completed / s
  double output_token_throughput = 0;  // output tokens / s
  double total_token_throughput = 0;   // (input + output) tokens / s
  int64_t good_requests = 0;           // meeting every objective given (all completed if none)
  double goodput = 0;                  // good requests / s
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
};

ServingSummary SummarizeRequests(const std::vector<RequestRecord>& records, double duration_s,
                                 const Slo& slo);

// Per-request derived values (ms); TPOT is -1 with fewer than two output tokens. E2E ends at the
// last token received (vLLM's benchmark), or at the stream's end for a request without tokens.
double TtftMs(const RequestRecord& r);
double TpotMs(const RequestRecord& r);
double E2eMs(const RequestRecord& r);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SERVING_STATS_H_
