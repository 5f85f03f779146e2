// Everything `blossom-bench serve` reports from one run: vLLM benchmark_serving's printed table
// (same labels, plus P90, std and failures), the JSON document (schema "blossom-bench-serve/1",
// documented in benchmarks/README.md), a markdown table, and SVG charts (TTFT/E2E CDF, TPOT/ITL
// CDF, latency over the run).
//
// Pure functions over plain values, except WriteServeFiles (file I/O); thread-safe.
#ifndef BLOSSOM_BENCHMARKS_SERVE_REPORT_H_
#define BLOSSOM_BENCHMARKS_SERVE_REPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "benchmarks/serving_stats.h"
#include "benchmarks/svg_chart.h"
#include "nlohmann/json.hpp"

namespace blossom {

inline constexpr char kServeSchema[] = "blossom-bench-serve/1";

struct ServeSettings {
  std::string target;       // as given: grpc://host:port or http://host:port
  std::string protocol;     // "grpc" or "http"
  std::string http_api;     // "tgi" or "openai" (http only)
  std::string model;        // --model ("" = whatever is served)
  int num_requests = 0;
  double request_rate = 0;  // +inf = all at once
  std::string arrival;      // "poisson" or "gamma" ("" before RunServeCommand resolves it)
  double burstiness = 1;
  int max_concurrency = 0;  // 0 = unlimited
  std::string prompt_len_dist;
  std::string output_len_dist;
  std::string prompt_kind;  // "text" or "ids"
  uint64_t seed = 0;
  Slo slo;
  std::string corpus;
};

struct ServeReport {
  std::string date_utc;
  std::string command;
  std::string commit;
  std::string machine;
  ServeSettings settings;
  nlohmann::json server;  // the server's GetModelInfo (gRPC), else null
  int64_t prompts_exact = 0;  // prompts whose token count hit the target
  int64_t tokenize_calls = 0;
  std::vector<RequestRecord> records;
  ServingSummary summary;
};

struct ServeOutputPaths {
  std::string json;
  std::string svg_prefix;
  std::string markdown;
};

// The table printed at the end of a run, vLLM style.
std::string FormatServeTable(const ServeReport& report);
nlohmann::json ServeReportToJson(const ServeReport& report);
// The JSON as written to --json: indented, one line per request; parses to ServeReportToJson.
std::string ServeJsonText(const ServeReport& report);
std::string ServeReportToMarkdown(const ServeReport& report);
// (file suffix, chart): "-latency-cdf", "-tpot-cdf", "-timeline".
std::vector<std::pair<std::string, LineChart>> ServeCharts(const ServeReport& report);
absl::Status WriteServeFiles(const ServeReport& report, const ServeOutputPaths& paths);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SERVE_REPORT_H_
