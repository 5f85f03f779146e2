// `blossom-bench`: Blossom's benchmark harness.
//
//   blossom-bench sweep --model DIR [--batch-sizes 1,2,4,...,256] [--max-new-tokens 100]
//       [--cycles 5] [--warmup 1] [--threads N] [--tp N] [--json PATH] [--svg-prefix PREFIX]
//       [--markdown PATH] [--mem-bandwidth-gbs G] [--peak-tflops T] [--commit SHA]
//       [--machine TEXT] [--ignore-eos=false]
//
// `sweep` is the seed's batch-size benchmark (see benchmarks/README.md for every number). The
// serving load generator will be a second command here. Exit code 1 on errors, 2 on usage errors.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "benchmarks/sweep_command.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, batch_sizes, "1,2,4,8,16,32,64,128,256", "Batch sizes, comma separated.");
ABSL_FLAG(int32_t, max_new_tokens, 100, "New tokens per sequence (greedy).");
ABSL_FLAG(int32_t, cycles, 5, "Timed generate() calls per batch size (the seed's 5).");
ABSL_FLAG(int32_t, warmup, 1, "Untimed generate() calls per batch size before timing.");
ABSL_FLAG(int32_t, threads, 0, "CPU threads per rank (0 = all cores / tp).");
ABSL_FLAG(int32_t, tp, 1, "Tensor-parallel ranks (CPU: threads in one process).");
ABSL_FLAG(bool, ignore_eos, true, "Generate exactly max_new_tokens per sequence.");
ABSL_FLAG(std::string, json, "", "Write the results as JSON here.");
ABSL_FLAG(std::string, svg_prefix, "", "Write PREFIX-{throughput,latency,roofline}.svg.");
ABSL_FLAG(std::string, markdown, "", "Write a markdown table of the results here.");
ABSL_FLAG(double, mem_bandwidth_gbs, 0.0, "Memory bandwidth for the roofline (0 = measure).");
ABSL_FLAG(double, peak_tflops, 0.0, "GEMM rate for the roofline (0 = measure).");
ABSL_FLAG(std::string, commit, "", "Git commit to record (e.g. $(git rev-parse --short HEAD)).");
ABSL_FLAG(std::string, machine, "", "Machine description to record.");

namespace {

// The process start, for the seed's "Start to ready to generate".
const auto kProcessStart = std::chrono::steady_clock::now();

int RunSweep(const std::string& command_line) {
  blossom::SweepCommandOptions options;
  options.process_start = kProcessStart;
  options.model_dir = absl::GetFlag(FLAGS_model);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.tensor_parallel_size = absl::GetFlag(FLAGS_tp);
  auto sizes = blossom::ParseBatchSizes(absl::GetFlag(FLAGS_batch_sizes));
  if (!sizes.ok()) {
    std::cerr << "blossom-bench: error: " << sizes.status().message() << std::endl;
    return 2;
  }
  options.sweep.batch_sizes = *sizes;
  options.sweep.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  options.sweep.cycles = absl::GetFlag(FLAGS_cycles);
  options.sweep.warmup = absl::GetFlag(FLAGS_warmup);
  options.sweep.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  options.overrides.mem_bandwidth_gbs = absl::GetFlag(FLAGS_mem_bandwidth_gbs);
  options.overrides.peak_tflops = absl::GetFlag(FLAGS_peak_tflops);
  options.outputs.json = absl::GetFlag(FLAGS_json);
  options.outputs.svg_prefix = absl::GetFlag(FLAGS_svg_prefix);
  options.outputs.markdown = absl::GetFlag(FLAGS_markdown);
  options.commit = absl::GetFlag(FLAGS_commit);
  options.machine = absl::GetFlag(FLAGS_machine);
  options.command = command_line;
  auto report = blossom::RunSweepCommand(options, &std::cout);
  if (!report.ok()) {
    std::cerr << "blossom-bench: error: " << report.status().message() << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "blossom-bench sweep --model DIR [--batch-sizes 1,2,4] [--max-new-tokens 100] "
      "[--cycles 5] [--warmup 1] [--json PATH] [--svg-prefix PREFIX] [--markdown PATH] "
      "[--mem-bandwidth-gbs G] [--peak-tflops T] [--commit SHA] [--machine TEXT]");
  // Recorded in the results; quoted so it can be pasted back into a shell.
  const std::string command_line =
      absl::StrJoin(argv, argv + argc, " ", [](std::string* out, const char* arg) {
        const std::string a = arg;
        if (a.find_first_of(" \t'\"$()&;|<>*?") == std::string::npos) {
          out->append(a);
          return;
        }
        out->append("'");
        for (char c : a) out->append(c == '\'' ? "'\\''" : std::string(1, c));
        out->append("'");
      });
  // Accept the documented dashed spellings (--max-new-tokens) as well as absl's underscores.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t i = 2; i < end; ++i)
      if (a[i] == '-') a[i] = '_';
  }
  std::vector<char*> argv2;
  for (std::string& a : args) argv2.push_back(a.data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(argv2.size()), argv2.data());
  if (positional.size() != 2) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << std::endl;
    return 2;
  }
  const std::string command = positional[1];
  if (command == "sweep") return RunSweep(command_line);
  std::cerr << "blossom-bench: unknown command '" << command << "' (expected: sweep)" << std::endl;
  return 2;
}
