// `blossom-bench sweep`: loads a model, measures (or takes) the hardware rates, runs the batch
// sweep, prints the seed-format stats per batch size and writes JSON / markdown / SVG.
//
// Model loading lives here and only here (ModelRunner on the CPU backend today), so adding the
// CUDA backend and its HardwareProbe touches one function. A future `serve` command (load generator
// against the gRPC/HTTP server) gets its own *_command library next to this one and shares
// sweep_report's output code.
//
// Thread-safety: runs on the calling thread; not reentrant for the same output paths.
#ifndef BLOSSOM_BENCHMARKS_SWEEP_COMMAND_H_
#define BLOSSOM_BENCHMARKS_SWEEP_COMMAND_H_

#include <chrono>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "benchmarks/batch_sweep.h"
#include "benchmarks/cpu_hardware_probe.h"
#include "benchmarks/hardware_probe.h"
#include "benchmarks/sweep_report.h"
#include "engine/model/model_runner.h"

namespace blossom {

struct SweepCommandOptions {
  std::string model_dir;
  std::string backend = "cpu";  // "cpu" or "cuda" (CUDA builds)
  double gpu_memory_fraction = 0.90;
  int tensor_parallel_size = 1;
  // CPU threads per rank (0 = UsableCpus() / tp: the affinity mask capped by a cgroup quota, as
  // ModelRunner counts them).
  int threads = 0;
  // Backend "cuda", tp 1: decode steps replayed from CUDA graphs (ModelRunnerOptions::step_graphs)
  // for batches up to the largest swept, contexts up to SweepMaxContext.
  bool cuda_graphs = true;
  // Backend "cuda", tp 1: time each cuBLASLt plan's candidates on its first call (in the untimed
  // warm-up cycles), as blossom-server does at its start (--cuda_time_gemm).
  bool cuda_time_gemm = true;
  // Backend "cuda": the kernel choices (ModelRunnerOptions::cuda_kernels; the same --cuda_* flags
  // as blossom-server's, engine/model:cuda_kernel_flags).
  CudaKernelOptions cuda_kernels;
  SweepOptions sweep;
  HardwareOverrides overrides;
  CpuProbeOptions probe;  // its thread count is taken from `threads`
  SweepOutputPaths outputs;
  std::string commit;
  std::string machine;
  std::string command;
  // "Start to ready to generate" is measured from here (main() takes it first thing).
  std::chrono::steady_clock::time_point process_start = std::chrono::steady_clock::now();
};

// Stats blocks and progress go to `log` (may be null).
// InvalidArgument for options no sweep could run with (ValidateSweepOptions, a negative
// --threads, a negative rate override, no --model): RunSweepCommand checks it before loading.
absl::Status ValidateSweepCommandOptions(const SweepCommandOptions& options);

absl::StatusOr<SweepReport> RunSweepCommand(const SweepCommandOptions& options, std::ostream* log);

// The longest context of the sweep's steps, max(1024, prompt_tokens) + max_new_tokens: the step
// graphs' max_context, so that no decode step of a long-prompt sweep runs uncaptured.
int32_t SweepMaxContext(const SweepOptions& sweep);

// CPU threads of all ranks together as the model runner starts them: threads_per_rank if > 0,
// else usable_cpus / world_size (at least 1), per rank.
int SweepThreads(int threads_per_rank, int world_size, int usable_cpus);

// Parses "1,2,4" (positive integers, no duplicates).
absl::StatusOr<std::vector<int32_t>> ParseBatchSizes(const std::string& text);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SWEEP_COMMAND_H_
