// `blossom-bench`: Blossom's benchmark harness.
//
//   blossom-bench sweep --model DIR [--batch-sizes 1,2,4,...,256] [--max-new-tokens 100]
//       [--cycles 5] [--warmup 1] [--threads N] [--tp N] [--json PATH] [--svg-prefix PREFIX]
//       [--markdown PATH] [--mem-bandwidth-gbs G] [--peak-tflops T] [--commit SHA]
//       [--machine TEXT] [--ignore-eos=false]
//
//   blossom-bench serve --target grpc://HOST:PORT|http://HOST:PORT [--api-key K]
//       [--num-requests 100] [--request-rate inf] [--arrival poisson|gamma] [--burstiness 1]
//       [--max-concurrency 0] [--prompt-len-dist fixed:128] [--output-len-dist fixed:128]
//       [--prompt-kind text|ids] [--http-api tgi|openai] [--seed 0] [--slo-ttft-ms X]
//       [--slo-tpot-ms Y] [--slo-e2e-ms Z] [--json PATH] [--svg-prefix PREFIX] [--markdown PATH]
//       [--model NAME] [--corpus tests/fixtures/corpus.txt] [--request-timeout 600]
//       [--commit SHA] [--machine TEXT]
//
// `sweep` is the seed's batch-size benchmark; `serve` is the serving load generator (see
// benchmarks/README.md for every number). A flag of the other subcommand is refused. Exit code
// 2 on usage errors, 1 on other errors, including a `serve` run in which no request succeeded.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/flags/reflection.h"
#include "benchmarks/serve_command.h"
#include "benchmarks/subcommand_flags.h"
#include "benchmarks/sweep_command.h"
#include "engine/model/cuda_kernel_flags.h"
#include "tools/cli/dashed_flags.h"

// Each help text starts with the subcommand(s) that read the flag; a flag of the other
// subcommand given on the command line is refused (subcommand_flags.h).
ABSL_FLAG(std::string, model, "",
          "sweep: the model directory (config.json, *.safetensors, tokenizer.json); serve: the "
          "served model's name sent with each request (\"\" = whatever is served).");
// sweep
ABSL_FLAG(std::string, batch_sizes, "1,2,4,8,16,32,64,128,256",
          "sweep: batch sizes, comma separated.");
ABSL_FLAG(int32_t, max_new_tokens, 100,
          "sweep: new tokens per sequence (greedy); serve takes --output-len-dist.");
ABSL_FLAG(int32_t, cycles, 5, "sweep: timed generate() calls per batch size (the seed's 5).");
ABSL_FLAG(int32_t, warmup, 1, "sweep: untimed generate() calls per batch size before timing.");
ABSL_FLAG(int32_t, threads, 0,
          "sweep: CPU threads per rank (0 = the CPUs this process may use, its affinity mask "
          "capped by a cgroup CPU limit, / tp).");
ABSL_FLAG(int32_t, tp, 1, "sweep: tensor-parallel ranks (CPU: threads in one process).");
ABSL_FLAG(std::string, backend, "cpu", "sweep: compute backend, cpu or cuda (CUDA builds).");
ABSL_FLAG(bool, cuda_time_gemm, true,
          "sweep, --backend cuda, --tp 1: time each cuBLASLt plan's candidates on its first call "
          "(in the warm-up cycles), as blossom-server does.");
ABSL_FLAG(bool, cuda_graphs, true,
          "sweep, --backend cuda, --tp 1: replay decode steps from CUDA graphs.");
ABSL_FLAG(double, gpu_memory_fraction, 0.90,
          "sweep, cuda: fraction of GPU memory for weights, activations and the KV cache.");
ABSL_FLAG(bool, ignore_eos, true,
          "sweep: generate exactly max_new_tokens per sequence (serve always ignores EOS).");
ABSL_FLAG(int32_t, prompt_tokens, 0,
          "sweep: > 0 replaces the seed prompts by prompts of this many fixed pseudo-random token "
          "ids (e.g. 2048 for the prefill against the GEMM rate).");
ABSL_FLAG(double, mem_bandwidth_gbs, 0.0,
          "sweep: memory bandwidth for the roofline (0 = measure).");
ABSL_FLAG(double, peak_tflops, 0.0, "sweep: GEMM rate for the roofline (0 = measure).");
// both
ABSL_FLAG(std::string, json, "", "sweep and serve: write the results as JSON here.");
ABSL_FLAG(std::string, svg_prefix, "",
          "sweep and serve: write PREFIX-{throughput,latency,roofline}.svg (sweep) or "
          "PREFIX-{latency-cdf,tpot-cdf,timeline}.svg (serve).");
ABSL_FLAG(std::string, markdown, "", "sweep and serve: write a markdown table of the results here.");
ABSL_FLAG(std::string, commit, "",
          "sweep and serve: git commit to record (e.g. $(git rev-parse --short HEAD)).");
ABSL_FLAG(std::string, machine, "", "sweep and serve: machine description to record.");
// serve
ABSL_FLAG(std::string, target, "", "serve: grpc://HOST:PORT (Blossom) or http://HOST:PORT "
          "(Blossom's gateway or TGI: prompts are cut with TGI's POST /tokenize).");
ABSL_FLAG(std::string, api_key, "", "serve: sent as 'Bearer' authorization.");
ABSL_FLAG(int32_t, num_requests, 100, "serve: requests to send.");
ABSL_FLAG(std::string, request_rate, "inf", "serve: requests per second (inf = all at once).");
ABSL_FLAG(std::string, arrival, "",
          "serve: poisson or gamma inter-arrival times (not given: poisson, or gamma when "
          "--burstiness is not 1).");
ABSL_FLAG(double, burstiness, 1.0,
          "serve: gamma shape (1 = poisson; < 1 burstier); alone, it means --arrival gamma.");
ABSL_FLAG(int32_t, max_concurrency, 0, "serve: most requests in flight (0 = unlimited).");
ABSL_FLAG(std::string, prompt_len_dist, "fixed:128",
          "serve: prompt tokens: fixed:N, uniform:LO:HI or normal:MEAN:STD.");
ABSL_FLAG(std::string, output_len_dist, "fixed:128", "serve: output tokens (exact: ignore_eos).");
ABSL_FLAG(std::string, prompt_kind, "text", "serve: text prompts, or ids (gRPC token_ids).");
ABSL_FLAG(std::string, http_api, "tgi", "serve over http: tgi (/generate_stream) or openai.");
ABSL_FLAG(uint64_t, seed, 0, "serve: seed of lengths, prompts and arrivals.");
ABSL_FLAG(double, slo_ttft_ms, 0, "serve: goodput objective on TTFT (0 = none).");
ABSL_FLAG(double, slo_tpot_ms, 0, "serve: goodput objective on TPOT (0 = none).");
ABSL_FLAG(double, slo_e2e_ms, 0, "serve: goodput objective on end-to-end latency (0 = none).");
ABSL_FLAG(std::string, corpus, "tests/fixtures/corpus.txt", "serve: text the prompts are cut from.");
ABSL_FLAG(double, request_timeout, 600,
          "serve: each request's whole deadline in seconds, gRPC and HTTP alike (connect, send "
          "and the whole stream; a request past it fails as a timeout); 0 = none.");

namespace {

// The process start, for the seed's "Start to ready to generate".
const auto kProcessStart = std::chrono::steady_clock::now();

int RunSweep(const std::string& command_line) {
  blossom::SweepCommandOptions options;
  options.process_start = kProcessStart;
  options.model_dir = absl::GetFlag(FLAGS_model);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  options.cuda_time_gemm = absl::GetFlag(FLAGS_cuda_time_gemm);
  options.cuda_kernels = blossom::CudaKernelOptionsFromFlags();
  options.gpu_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
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
  options.sweep.prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  options.overrides.mem_bandwidth_gbs = absl::GetFlag(FLAGS_mem_bandwidth_gbs);
  options.overrides.peak_tflops = absl::GetFlag(FLAGS_peak_tflops);
  options.outputs.json = absl::GetFlag(FLAGS_json);
  options.outputs.svg_prefix = absl::GetFlag(FLAGS_svg_prefix);
  options.outputs.markdown = absl::GetFlag(FLAGS_markdown);
  options.commit = absl::GetFlag(FLAGS_commit);
  options.machine = absl::GetFlag(FLAGS_machine);
  options.command = command_line;
  // Bad flags: exit 2, before anything loads (RunSweepCommand checks them again, for its other
  // callers).
  if (absl::Status valid = blossom::ValidateSweepCommandOptions(options); !valid.ok()) {
    std::cerr << "blossom-bench: error: " << valid.message() << std::endl;
    return 2;
  }
  auto report = blossom::RunSweepCommand(options, &std::cout);
  if (!report.ok()) {
    std::cerr << "blossom-bench: error: " << report.status().message() << std::endl;
    return 1;
  }
  return 0;
}

int RunServe(const std::string& command_line) {
  blossom::ServeCommandOptions options;
  blossom::ServeSettings& s = options.settings;
  s.target = absl::GetFlag(FLAGS_target);
  s.model = absl::GetFlag(FLAGS_model);
  s.num_requests = absl::GetFlag(FLAGS_num_requests);
  const std::string rate = absl::AsciiStrToLower(absl::GetFlag(FLAGS_request_rate));
  if (rate == "inf") {
    s.request_rate = std::numeric_limits<double>::infinity();
  } else if (!absl::SimpleAtod(rate, &s.request_rate) || !(s.request_rate > 0)) {
    std::cerr << "blossom-bench: error: --request-rate '" << rate
              << "': expected a number > 0 or inf" << std::endl;
    return 2;
  }
  s.arrival = absl::GetFlag(FLAGS_arrival);
  s.burstiness = absl::GetFlag(FLAGS_burstiness);
  s.max_concurrency = absl::GetFlag(FLAGS_max_concurrency);
  s.prompt_len_dist = absl::GetFlag(FLAGS_prompt_len_dist);
  s.output_len_dist = absl::GetFlag(FLAGS_output_len_dist);
  s.prompt_kind = absl::GetFlag(FLAGS_prompt_kind);
  s.http_api = absl::GetFlag(FLAGS_http_api);
  s.seed = absl::GetFlag(FLAGS_seed);
  s.slo.ttft_ms = absl::GetFlag(FLAGS_slo_ttft_ms);
  s.slo.tpot_ms = absl::GetFlag(FLAGS_slo_tpot_ms);
  s.slo.e2e_ms = absl::GetFlag(FLAGS_slo_e2e_ms);
  s.corpus = absl::GetFlag(FLAGS_corpus);
  options.api_key = absl::GetFlag(FLAGS_api_key);
  options.request_timeout_s = absl::GetFlag(FLAGS_request_timeout);
  options.outputs.json = absl::GetFlag(FLAGS_json);
  options.outputs.svg_prefix = absl::GetFlag(FLAGS_svg_prefix);
  options.outputs.markdown = absl::GetFlag(FLAGS_markdown);
  options.commit = absl::GetFlag(FLAGS_commit);
  options.machine = absl::GetFlag(FLAGS_machine);
  options.command = command_line;
  auto report = blossom::RunServeCommand(options, &std::cout);
  if (!report.ok()) {
    std::cerr << "blossom-bench: error: " << report.status().message() << std::endl;
    return report.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "blossom-bench sweep --model DIR [--batch-sizes 1,2,4] [--max-new-tokens 100] "
      "[--cycles 5] [--warmup 1] [--threads N] [--tp N] [--backend cpu|cuda] [--json PATH] "
      "[--svg-prefix PREFIX] [--markdown PATH] [--mem-bandwidth-gbs G] [--peak-tflops T] "
      "[--commit SHA] [--machine TEXT]\n"
      "blossom-bench serve --target grpc://HOST:PORT|http://HOST:PORT [--num-requests N] "
      "[--request-rate R|inf] [--arrival poisson|gamma] [--burstiness B] [--max-concurrency C] "
      "[--prompt-len-dist fixed:128] [--output-len-dist fixed:128] [--seed S] "
      "[--slo-ttft-ms X] [--slo-tpot-ms Y] [--slo-e2e-ms Z] [--request-timeout S] [--json PATH] "
      "[--svg-prefix P]\n"
      "Each flag's help names the subcommand that reads it; the other subcommand refuses it.");
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
  // Accept the documented dashed spellings (--max-new-tokens) as well as absl's underscores,
  // leaving values alone (`--stop --END--`).
  blossom::NormalizeDashedFlags(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() != 2) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << std::endl;
    return 2;
  }
  const std::string command = positional[1];
  // Flags set to anything but their default (this Abseil keeps IsSpecifiedOnCommandLine
  // private; giving a flag its default changes nothing, so ignoring that is harmless).
  std::vector<std::string> specified;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->CurrentValue() != flag->DefaultValue()) specified.emplace_back(name);
  }
  std::sort(specified.begin(), specified.end());  // the same flag named first every time
  if (absl::Status s = blossom::CheckSubcommandFlags(command, specified); !s.ok()) {
    std::cerr << "blossom-bench: error: " << s.message() << std::endl;
    return 2;
  }
  if (command == "sweep") return RunSweep(command_line);
  if (command == "serve") return RunServe(command_line);
  std::cerr << "blossom-bench: unknown command '" << command << "' (expected: sweep or serve)"
            << std::endl;
  return 2;
}
