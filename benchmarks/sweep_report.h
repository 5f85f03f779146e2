// Everything the batch sweep reports, from one run: the seed's four lines plus prefill, decode
// percentiles, tokens/s and the roofline per batch size (text), the JSON document, a markdown
// table, and SVG charts of throughput, latency and the roofline against batch size.
//
// The JSON schema is documented in benchmarks/README.md; bump kSweepSchema when a field changes
// meaning or disappears (adding fields keeps the version).
//
// Pure functions over plain values, except WriteSweepFiles (file I/O); thread-safe.
#ifndef BLOSSOM_BENCHMARKS_SWEEP_REPORT_H_
#define BLOSSOM_BENCHMARKS_SWEEP_REPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "benchmarks/batch_sweep.h"
#include "benchmarks/bloom_shapes.h"
#include "benchmarks/hardware_probe.h"
#include "benchmarks/roofline.h"
#include "benchmarks/svg_chart.h"
#include "kernels/dtype.h"
#include "nlohmann/json.hpp"

namespace blossom {

inline constexpr char kSweepSchema[] = "blossom-bench-sweep/1";

// Where and on what the sweep ran.
struct SweepContext {
  std::string date_utc;  // ISO 8601
  std::string command;   // the command line, as typed
  std::string commit;    // given by the caller (--commit); "" if unknown
  std::string machine;   // free text (--machine), e.g. "CPU, 2 cores, no GPU"
  std::string backend;   // "cpu"
  int threads = 0;       // all ranks together
  int tensor_parallel_size = 1;
  std::string model_dir;
  BloomShape shape;
  DType weight_dtype = DType::kF32;
  DType kv_dtype = DType::kF32;
  double load_s = 0.0;            // weights + tokenizer
  double start_to_ready_s = 0.0;  // process start -> ready to generate (seed line 2)
  HardwareRates rates;
};

struct SweepReport {
  SweepContext context;
  SweepRun run;
  std::vector<RooflinePoint> roofline;  // per batch, measured against the mean decode step
};

SweepReport BuildSweepReport(SweepContext context, SweepRun run);

// The seed's "*** Performance stats:" block for one batch size, then Blossom's extra lines.
std::string FormatBatchStats(const SweepContext& context, const BatchResult& batch,
                             const RooflinePoint& roofline);

nlohmann::json SweepReportToJson(const SweepReport& report);
std::string SweepReportToMarkdown(const SweepReport& report);
// (file suffix, chart): "throughput", "latency", "roofline".
std::vector<std::pair<std::string, LineChart>> SweepCharts(const SweepReport& report);

struct SweepOutputPaths {
  std::string json;        // "" = skip
  std::string markdown;    // "" = skip
  std::string svg_prefix;  // writes <prefix>-throughput.svg etc.; "" = skip
};
// Writes the requested files; `written` (optional) receives their paths.
absl::Status WriteSweepFiles(const SweepReport& report, const SweepOutputPaths& paths,
                             std::vector<std::string>* written);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SWEEP_REPORT_H_
