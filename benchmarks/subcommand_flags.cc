#include "benchmarks/subcommand_flags.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace blossom {
namespace {

// Keep in step with the ABSL_FLAGs of blossom_bench_main.cc (its help texts say the same);
// --model, --json, --svg-prefix, --markdown, --commit and --machine are read by both.
constexpr absl::string_view kSweepOnly[] = {
    "batch_sizes", "max_new_tokens", "cycles", "warmup", "threads", "tp", "backend", "ignore_eos",
    "gpu_memory_fraction", "prompt_tokens", "mem_bandwidth_gbs", "peak_tflops"};
constexpr absl::string_view kServeOnly[] = {
    "target", "api_key", "num_requests", "request_rate", "arrival", "burstiness",
    "max_concurrency", "prompt_len_dist", "output_len_dist", "prompt_kind", "http_api", "seed",
    "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms", "corpus", "request_timeout"};

bool In(absl::string_view name, const absl::string_view* begin, const absl::string_view* end) {
  return std::find(begin, end, name) != end;
}

}  // namespace

bool IsSweepOnlyFlag(absl::string_view name) {
  // --cuda_graphs, --cuda_time_gemm and engine/model:cuda_kernel_flags' --cuda_* flags: all
  // configure the model sweep loads (serve's server has its own).
  return absl::StartsWith(name, "cuda_") ||
         In(name, std::begin(kSweepOnly), std::end(kSweepOnly));
}

bool IsServeOnlyFlag(absl::string_view name) {
  return In(name, std::begin(kServeOnly), std::end(kServeOnly));
}

absl::Status CheckSubcommandFlags(const std::string& command,
                                  const std::vector<std::string>& specified) {
  const bool sweep = command == "sweep";
  if (!sweep && command != "serve") return absl::OkStatus();
  for (const std::string& name : specified) {
    if (sweep ? IsServeOnlyFlag(name) : IsSweepOnlyFlag(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", absl::StrReplaceAll(name, {{"_", "-"}}), " applies to `blossom-bench ",
          sweep ? "serve" : "sweep", "` only; `", command,
          "` would ignore it (drop it, or run the other subcommand)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace blossom
