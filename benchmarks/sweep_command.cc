#include "benchmarks/sweep_command.h"

#include <algorithm>
#include <ctime>
#include <memory>
#include <set>

#include "benchmarks/gpu/hardware_probe_factory.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/generate/batch_generator.h"
#include "engine/loader/file_util.h"
#include "engine/model/model_runner.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/cpu_budget.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Fails before any work if an output file could not be created (a sweep can take hours).
absl::Status CheckOutputDirectory(const std::string& path, const char* flag) {
  if (path.empty()) return absl::OkStatus();
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  if (GetPathKind(dir) != PathKind::kDirectory) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": directory '", dir, "' does not exist"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ParseBatchSizes(const std::string& text) {
  std::vector<int32_t> sizes;
  std::set<int32_t> seen;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t b = 0;
    if (!absl::SimpleAtoi(piece, &b) || b <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch size '", piece, "' is not a positive integer"));
    }
    if (!seen.insert(b).second) {
      return absl::InvalidArgumentError(absl::StrCat("batch size ", b, " is listed twice"));
    }
    sizes.push_back(b);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("no batch sizes given");
  return sizes;
}

int32_t SweepMaxContext(const SweepOptions& sweep) {
  // The seed's prompts are a few dozen tokens, far under 1024; --prompt-tokens N prompts are N.
  return std::max(1024, sweep.prompt_tokens) + sweep.max_new_tokens;
}

int SweepThreads(int threads_per_rank, int world_size, int usable_cpus) {
  const int ranks = std::max(1, world_size);
  // As ModelRunner::Create: threads_per_rank, else the usable CPUs split over the ranks.
  const int per_rank = threads_per_rank > 0 ? threads_per_rank : std::max(1, usable_cpus / ranks);
  return per_rank * ranks;
}

absl::Status ValidateSweepCommandOptions(const SweepCommandOptions& options) {
  if (options.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  BLOSSOM_RETURN_IF_ERROR(ValidateSweepOptions(options.sweep));
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be >= 0 (0 = the usable CPUs), got ", options.threads));
  }
  // 0 = measure; a negative rate is a typo, not "measure".
  if (options.overrides.mem_bandwidth_gbs < 0.0 || options.overrides.peak_tflops < 0.0) {
    return absl::InvalidArgumentError(
        "--mem-bandwidth-gbs and --peak-tflops must be > 0 (or 0 to measure them)");
  }
  return absl::OkStatus();
}

absl::StatusOr<SweepReport> RunSweepCommand(const SweepCommandOptions& options, std::ostream* log) {
  // Before the load, which on a large checkpoint takes minutes.
  BLOSSOM_RETURN_IF_ERROR(ValidateSweepCommandOptions(options));
  BLOSSOM_RETURN_IF_ERROR(CheckOutputDirectory(options.outputs.json, "--json"));
  BLOSSOM_RETURN_IF_ERROR(CheckOutputDirectory(options.outputs.markdown, "--markdown"));
  BLOSSOM_RETURN_IF_ERROR(CheckOutputDirectory(options.outputs.svg_prefix, "--svg-prefix"));
  SweepContext context;
  context.date_utc = UtcNow();
  context.command = options.command;
  context.commit = options.commit;
  context.machine = options.machine;
  context.model_dir = options.model_dir;

  // Load (the seed's "start to ready": process start -> model and tokenizer usable).
  const auto load_start = std::chrono::steady_clock::now();
  ModelRunnerOptions runner_options;
  runner_options.model_dir = options.model_dir;
  runner_options.backend = options.backend;
  runner_options.gpu_memory_fraction = options.gpu_memory_fraction;
  runner_options.tensor_parallel_size = options.tensor_parallel_size;
  runner_options.threads_per_rank = options.threads;
  runner_options.time_gemm_candidates = options.backend == "cuda" && options.cuda_time_gemm;
  runner_options.cuda_kernels = options.cuda_kernels;
  if (options.backend == "cuda" && options.cuda_graphs) {
    runner_options.step_graphs = true;
    const std::vector<int32_t>& sizes = options.sweep.batch_sizes;
    runner_options.step_graph_options.max_batch =
        std::min<int32_t>(4096, *std::max_element(sizes.begin(), sizes.end()));
    runner_options.step_graph_options.max_context = SweepMaxContext(options.sweep);
  }
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                           ModelRunner::Create(runner_options));
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           Tokenizer::FromModelDir(options.model_dir, runner->vocab_size()));
  context.load_s = SecondsSince(load_start);
  context.start_to_ready_s = SecondsSince(options.process_start);
  context.backend = runner->info().backend;
  context.tensor_parallel_size = runner->world_size();
  // What the runner started (the probe below uses as many), not every core of the machine.
  context.threads = SweepThreads(options.threads, runner->world_size(), UsableCpus());
  const BloomConfig& config = runner->config();
  context.shape =
      BloomShape{"loaded", config.hidden_size, config.n_layer, config.n_head, config.vocab_size};
  context.weight_dtype = runner->info().weight_dtype;
  // The CPU backend keeps activations and the KV cache in fp32; GPU backends in the weights'
  // half-precision dtype.
  context.kv_dtype = context.backend == "cpu" ? DType::kF32 : context.weight_dtype;
  if (log != nullptr) {
    *log << "[blossom-bench] model " << options.model_dir << " (" << DTypeName(context.weight_dtype)
         << " weights, " << context.shape.ParamCount() << " parameters), backend "
         << context.backend << ", tp " << context.tensor_parallel_size << ", " << context.threads
         << " threads, loaded in " << context.load_s << " s" << std::endl;
  }

  // Hardware rates after loading, so the probes do not compete with the page-in.
  HardwareProbeFactoryOptions probe_options;
  probe_options.cpu = options.probe;
  probe_options.cpu.threads = context.threads;
  std::unique_ptr<HardwareProbe> probe;  // none needed when both rates are given
  if (options.overrides.mem_bandwidth_gbs <= 0.0 || options.overrides.peak_tflops <= 0.0) {
    BLOSSOM_ASSIGN_OR_RETURN(probe, MakeHardwareProbe(context.backend, probe_options));
  }
  BLOSSOM_ASSIGN_OR_RETURN(
      context.rates, ResolveHardwareRates(probe.get(), context.weight_dtype, options.overrides));
  if (log != nullptr) {
    *log << "[blossom-bench] roofline rates: " << context.rates.mem_bytes_per_s / 1e9 << " GB/s ("
         << context.rates.mem_source << "), " << context.rates.gemm_flops_per_s / 1e9
         << " GFLOP/s (" << context.rates.flops_source << ")" << std::endl;
  }

  BatchGenerator generator(runner.get(), tokenizer.get());
  const DecodeCost cost = DecodeCostOf(context.shape, context.weight_dtype, context.kv_dtype);
  BLOSSOM_ASSIGN_OR_RETURN(
      SweepRun run, RunBatchSweep(&generator, tokenizer.get(), options.sweep, options.process_start,
                                  [&](const BatchResult& batch) {
                                    if (log == nullptr) return;
                                    const RooflinePoint r =
                                        ComputeRoofline(cost, context.rates, batch.batch_size,
                                                        batch.mean_kv_tokens_per_step,
                                                        batch.decode_step_ms.mean / 1000.0);
                                    *log << FormatBatchStats(context, batch, r) << std::flush;
                                  }));
  SweepReport report = BuildSweepReport(std::move(context), std::move(run));
  std::vector<std::string> written;
  BLOSSOM_RETURN_IF_ERROR(WriteSweepFiles(report, options.outputs, &written));
  if (log != nullptr) {
    for (const std::string& path : written) *log << "[blossom-bench] wrote " << path << std::endl;
  }
  return report;
}

}  // namespace blossom
