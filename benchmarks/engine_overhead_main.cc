// `engine-overhead-bench`: the engine's host time per decode step at full batch, with a model
// that takes no time (benchmarks/engine_overhead.h).
//
//   engine-overhead-bench --model DIR [--batch 256] [--prompt_tokens 128] [--new_tokens 128]
//                         [--stop_strings 2] [--forward_ms 0] [--json out.json]
#include <fstream>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "benchmarks/engine_overhead.h"
#include "tools/cli/dashed_flags.h"

ABSL_FLAG(std::string, model, "",
          "Model directory: config.json and tokenizer.json (no weights are read).");
ABSL_FLAG(int32_t, batch, 256, "Requests, all running at once.");
ABSL_FLAG(int32_t, prompt_tokens, 128, "Prompt tokens per request (random ids).");
ABSL_FLAG(int32_t, new_tokens, 128, "Generated tokens per request.");
ABSL_FLAG(int32_t, stop_strings, 2, "Stop strings per request (never matched).");
ABSL_FLAG(double, forward_ms, 0.0, "Simulated forward time per step, in ms.");
ABSL_FLAG(std::string, json, "", "Also write the report as JSON here.");

int main(int argc, char** argv) {
  blossom::NormalizeDashedFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  blossom::EngineOverheadOptions options;
  options.model_dir = absl::GetFlag(FLAGS_model);
  options.batch = absl::GetFlag(FLAGS_batch);
  options.prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  options.new_tokens = absl::GetFlag(FLAGS_new_tokens);
  options.stop_strings = absl::GetFlag(FLAGS_stop_strings);
  options.forward_ms = absl::GetFlag(FLAGS_forward_ms);
  if (options.model_dir.empty()) {
    std::cerr << "engine-overhead-bench: error: --model is required" << std::endl;
    return 2;
  }
  absl::StatusOr<blossom::EngineOverheadReport> report = blossom::RunEngineOverhead(options);
  if (!report.ok()) {
    std::cerr << "engine-overhead-bench: error: " << report.status() << std::endl;
    return 1;
  }
  const blossom::EngineOverheadReport& r = *report;
  std::cout << "decode steps at batch " << options.batch << ": " << r.full_decode_steps << " of "
            << r.steps << " steps; " << r.generated_tokens << " tokens in " << r.wall_seconds
            << " s\n"
            << "host ms per step (median / p90): schedule " << r.schedule.median_ms << " / "
            << r.schedule.p90_ms << ", sample " << r.sample.median_ms << " / " << r.sample.p90_ms
            << ", output " << r.output.median_ms << " / " << r.output.p90_ms << ", deliver "
            << r.deliver.median_ms << " / " << r.deliver.p90_ms << ", total "
            << r.host.median_ms << " / " << r.host.p90_ms << "; loop iteration "
            << r.iteration.median_ms << " / " << r.iteration.p90_ms << "\n";
  const std::string json = blossom::EngineOverheadJson(options, r);
  std::cout << json << std::endl;
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    std::ofstream out(path);
    out << json << "\n";
    if (!out) {
      std::cerr << "engine-overhead-bench: error: cannot write " << path << std::endl;
      return 1;
    }
  }
  return 0;
}
