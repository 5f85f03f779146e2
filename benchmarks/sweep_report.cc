#include "benchmarks/sweep_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/loader/file_util.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

using nlohmann::json;

json PercentilesJson(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

}  // namespace

SweepReport BuildSweepReport(SweepContext context, SweepRun run) {
  SweepReport report;
  report.context = std::move(context);
  report.run = std::move(run);
  const DecodeCost cost =
      DecodeCostOf(report.context.shape, report.context.weight_dtype, report.context.kv_dtype);
  for (const BatchResult& b : report.run.batches) {
    report.roofline.push_back(ComputeRoofline(cost, report.context.rates, b.batch_size,
                                              b.mean_kv_tokens_per_step,
                                              b.decode_step_ms.mean / 1000.0));
  }
  return report;
}

std::string FormatBatchStats(const SweepContext& context, const BatchResult& b,
                             const RooflinePoint& r) {
  const PrefillPoint prefill = ComputePrefillRoofline(context.shape, context.rates,
                                                      b.prompt_lengths, b.prefill_ms.p50 / 1000.0);
  // The first five lines are the seed's format exactly (bloom-ds-inference.py --benchmark).
  return absl::StrFormat(
      "\n*** Performance stats:\n"
      "Throughput per token including tokenize: %.2f msecs\n"
      "Start to ready to generate: %.3f secs\n"
      "Tokenize and generate %d (bs=%d) tokens: %.3f secs\n"
      "Start to finish: %.3f secs\n"
      "Prefill (bs=%d): %.2f ms mean, %.2f ms p50\n"
      "Decode per token: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms (mean %.2f ms)\n"
      "Tokens per second: %.1f (decode only: %.1f)\n"
      "Roofline per decode step: memory floor %.3f ms, compute floor %.3f ms -> %s bound, "
      "%.1f%% of the floor achieved\n"
      "Prefill vs the GEMM rate (p50): %.1f TFLOP/s, %.1f%% of the rate\n",
      b.ms_per_token, context.start_to_ready_s, b.generate_tokens, b.batch_size, b.generate_s,
      context.start_to_ready_s + b.generate_s, b.batch_size, b.prefill_ms.mean, b.prefill_ms.p50,
      b.decode_step_ms.p50, b.decode_step_ms.p90, b.decode_step_ms.p99, b.decode_step_ms.mean,
      b.tokens_per_second, b.decode_tokens_per_second, r.memory_floor_s * 1000.0,
      r.compute_floor_s * 1000.0, r.bound, r.fraction * 100.0, prefill.tflops,
      prefill.fraction * 100.0);
}

json SweepReportToJson(const SweepReport& report) {
  const SweepContext& c = report.context;
  const SweepOptions& o = report.run.options;
  const DecodeCost cost = DecodeCostOf(c.shape, c.weight_dtype, c.kv_dtype);
  json doc;
  doc["schema"] = kSweepSchema;
  doc["date_utc"] = c.date_utc;
  doc["command"] = c.command;
  doc["commit"] = c.commit;
  doc["machine"] = c.machine;
  doc["backend"] = c.backend;
  doc["threads"] = c.threads;
  doc["tensor_parallel_size"] = c.tensor_parallel_size;
  doc["model"] = {{"dir", c.model_dir},
                  {"hidden_size", c.shape.hidden},
                  {"n_layer", c.shape.layers},
                  {"n_head", c.shape.heads},
                  {"vocab_size", c.shape.vocab},
                  {"params", cost.params},
                  {"weight_dtype", DTypeName(c.weight_dtype)},
                  {"kv_dtype", DTypeName(c.kv_dtype)},
                  {"weight_bytes", cost.weight_bytes},
                  {"kv_bytes_per_token", cost.kv_bytes_per_token},
                  {"load_s", c.load_s}};
  doc["settings"] = {{"batch_sizes", o.batch_sizes},
                     {"max_new_tokens", o.max_new_tokens},
                     {"warmup", o.warmup},
                     {"cycles", o.cycles},
                     {"greedy", true},
                     {"ignore_eos", o.ignore_eos},
                     {"prompt_tokens", o.prompt_tokens},
                     {"prompts", o.prompts}};
  doc["hardware"] = {{"mem_bandwidth_gbs", c.rates.mem_bytes_per_s / 1e9},
                     {"mem_bandwidth_source", c.rates.mem_source},
                     {"gemm_tflops", c.rates.gemm_flops_per_s / 1e12},
                     {"gemm_tflops_source", c.rates.flops_source}};
  doc["start_to_ready_s"] = c.start_to_ready_s;
  json results = json::array();
  for (size_t i = 0; i < report.run.batches.size(); ++i) {
    const BatchResult& b = report.run.batches[i];
    const RooflinePoint& r = report.roofline[i];
    json cycles = json::array();
    for (const CycleRecord& cy : b.cycles) {
      cycles.push_back({{"start_s", cy.start_s},
                        {"tokenized_s", cy.tokenized_s},
                        {"first_token_s", cy.first_token_s},
                        {"prefill_done_s", cy.prefill_done_s},
                        {"end_s", cy.end_s},
                        {"prompt_tokens", cy.prompt_tokens},
                        {"generated_tokens", cy.generated_tokens},
                        {"prefill_s", cy.prefill_s},
                        {"decode_s", cy.decode_s},
                        {"decode_steps", cy.decode_steps}});
    }
    const PrefillPoint prefill =
        ComputePrefillRoofline(c.shape, c.rates, b.prompt_lengths, b.prefill_ms.p50 / 1000.0);
    results.push_back({
        {"batch_size", b.batch_size},
        {"prompt_lengths", b.prompt_lengths},
        {"seed",
         {{"throughput_ms_per_token", b.ms_per_token},
          {"start_to_ready_s", c.start_to_ready_s},
          {"generate_tokens", b.generate_tokens},
          {"generate_s", b.generate_s},
          {"start_to_finish_s", c.start_to_ready_s + b.generate_s}}},
        {"generated_tokens", b.generated_tokens},
        {"timed_s", b.timed_s},
        {"tokens_per_second", b.tokens_per_second},
        {"decode_tokens_per_second", b.decode_tokens_per_second},
        {"prefill_ms", PercentilesJson(b.prefill_ms)},
        {"decode_ms_per_token", PercentilesJson(b.decode_step_ms)},
        {"roofline",
         {{"kv_tokens_per_step", r.kv_tokens_per_step},
          {"bytes_per_step", r.bytes_per_step},
          {"flops_per_step", r.flops_per_step},
          {"memory_floor_ms", r.memory_floor_s * 1000.0},
          {"compute_floor_ms", r.compute_floor_s * 1000.0},
          {"floor_ms", r.floor_s * 1000.0},
          {"bound", r.bound},
          {"measured_step_ms", r.measured_step_s * 1000.0},
          {"memory_fraction", r.memory_fraction},
          {"compute_fraction", r.compute_fraction},
          {"fraction", r.fraction}}},
        {"prefill_roofline",
         {{"flops", prefill.flops},
          {"compute_floor_ms", prefill.compute_floor_s * 1000.0},
          {"measured_p50_ms", prefill.measured_s * 1000.0},
          {"tflops", prefill.tflops},
          {"fraction_of_gemm_rate", prefill.fraction}}},
        {"cycles", cycles},
    });
  }
  doc["results"] = results;
  return doc;
}

std::string SweepReportToMarkdown(const SweepReport& report) {
  const SweepContext& c = report.context;
  const SweepOptions& o = report.run.options;
  std::string md = absl::StrFormat(
      "| bs | ms/token (seed) | generate s | tokens/s | prefill ms | decode ms p50 | p90 | p99 | "
      "mem floor ms | compute floor ms | bound | achieved |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
  for (size_t i = 0; i < report.run.batches.size(); ++i) {
    const BatchResult& b = report.run.batches[i];
    const RooflinePoint& r = report.roofline[i];
    absl::StrAppendFormat(
        &md,
        "| %d | %.2f | %.3f | %.1f | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %s | %.1f%% |\n",
        b.batch_size, b.ms_per_token, b.generate_s, b.tokens_per_second, b.prefill_ms.mean,
        b.decode_step_ms.p50, b.decode_step_ms.p90, b.decode_step_ms.p99, r.memory_floor_s * 1000.0,
        r.compute_floor_s * 1000.0, r.bound, r.fraction * 100.0);
  }
  absl::StrAppendFormat(
      &md,
      "\nStart to ready to generate: %.3f s (load %.3f s). %d new tokens, greedy, "
      "%d warm-up + %d timed generate() per batch size. Roofline rates: %.2f GB/s "
      "(%s), %.4f TFLOP/s (%s).\n",
      c.start_to_ready_s, c.load_s, o.max_new_tokens, o.warmup, o.cycles,
      c.rates.mem_bytes_per_s / 1e9, c.rates.mem_source, c.rates.gemm_flops_per_s / 1e12,
      c.rates.flops_source);
  return md;
}

std::vector<std::pair<std::string, LineChart>> SweepCharts(const SweepReport& report) {
  // "bloom-demo, cpu": the model directory's last component names the model.
  std::string model = report.context.model_dir;
  while (model.size() > 1 && model.back() == '/') model.pop_back();
  const std::string where =
      absl::StrCat(model.substr(model.rfind('/') == std::string::npos ? 0 : model.rfind('/') + 1),
                   ", ", report.context.backend);
  LineChart throughput;
  throughput.title = absl::StrCat("Throughput vs batch size (", where, ")");
  throughput.x_label = "batch size";
  throughput.y_label = "tokens per second";
  throughput.log2_x = true;
  throughput.series = {{"tokens/s (generate)", {}}, {"tokens/s (decode)", {}}};

  LineChart latency;
  latency.title = absl::StrCat("Latency vs batch size (", where, ")");
  latency.x_label = "batch size";
  latency.y_label = "milliseconds";
  latency.log2_x = true;
  latency.log10_y = true;
  latency.series = {{"decode ms/token p50", {}},
                    {"decode ms/token p90", {}},
                    {"decode ms/token p99", {}},
                    {"prefill ms (mean)", {}},
                    {"seed ms/token", {}}};

  LineChart roofline;
  roofline.title = absl::StrCat("Decode step vs roofline floors (", where, ")");
  roofline.x_label = "batch size";
  roofline.y_label = "ms per decode step";
  roofline.log2_x = true;
  roofline.log10_y = true;
  roofline.series = {{"measured (mean)", {}}, {"memory floor", {}}, {"compute floor", {}}};

  for (size_t i = 0; i < report.run.batches.size(); ++i) {
    const BatchResult& b = report.run.batches[i];
    const RooflinePoint& r = report.roofline[i];
    const double x = b.batch_size;
    throughput.series[0].points.push_back({x, b.tokens_per_second});
    throughput.series[1].points.push_back({x, b.decode_tokens_per_second});
    latency.series[0].points.push_back({x, b.decode_step_ms.p50});
    latency.series[1].points.push_back({x, b.decode_step_ms.p90});
    latency.series[2].points.push_back({x, b.decode_step_ms.p99});
    latency.series[3].points.push_back({x, b.prefill_ms.mean});
    latency.series[4].points.push_back({x, b.ms_per_token});
    roofline.series[0].points.push_back({x, r.measured_step_s * 1000.0});
    roofline.series[1].points.push_back({x, r.memory_floor_s * 1000.0});
    roofline.series[2].points.push_back({x, r.compute_floor_s * 1000.0});
  }
  return {{"throughput", throughput}, {"latency", latency}, {"roofline", roofline}};
}

absl::Status WriteSweepFiles(const SweepReport& report, const SweepOutputPaths& paths,
                             std::vector<std::string>* written) {
  std::vector<std::string> local;
  if (written == nullptr) written = &local;
  if (!paths.json.empty()) {
    BLOSSOM_RETURN_IF_ERROR(
        WriteStringToFile(paths.json, SweepReportToJson(report).dump(2) + "\n"));
    written->push_back(paths.json);
  }
  if (!paths.markdown.empty()) {
    BLOSSOM_RETURN_IF_ERROR(WriteStringToFile(paths.markdown, SweepReportToMarkdown(report)));
    written->push_back(paths.markdown);
  }
  if (!paths.svg_prefix.empty()) {
    for (const auto& [suffix, chart] : SweepCharts(report)) {
      const std::string path = absl::StrCat(paths.svg_prefix, "-", suffix, ".svg");
      BLOSSOM_RETURN_IF_ERROR(WriteStringToFile(path, RenderSvg(chart)));
      written->push_back(path);
    }
  }
  return absl::OkStatus();
}

}  // namespace blossom
