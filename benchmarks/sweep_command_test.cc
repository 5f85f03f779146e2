#include "benchmarks/sweep_command.h"

#include <sched.h>

#include <cstdlib>
#include <sstream>

#include "engine/loader/file_util.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_budget.h"
#include "nlohmann/json.hpp"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + 1)) ++n;
  return n;
}

TEST(ParseBatchSizesTest, Parses) {
  EXPECT_EQ(*ParseBatchSizes("1,2,4"), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(*ParseBatchSizes("8"), (std::vector<int32_t>{8}));
  EXPECT_FALSE(ParseBatchSizes("").ok());
  EXPECT_FALSE(ParseBatchSizes("1,0").ok());
  EXPECT_FALSE(ParseBatchSizes("1,x").ok());
  EXPECT_FALSE(ParseBatchSizes("2,2").ok());
}

// The whole `blossom-bench sweep` path on the tiny fixture: files written, every field present,
// exact token counts, monotone timestamps.
TEST(SweepCommandTest, EndToEndOnTinyModel) {
  SweepCommandOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.threads = 2;
  options.sweep.batch_sizes = {1, 2, 4};
  options.sweep.max_new_tokens = 4;
  options.sweep.cycles = 2;
  options.sweep.warmup = 1;
  options.probe.copy_bytes = 4 << 20;
  options.probe.repetitions = 1;
  options.probe.gemm_m = 4;
  options.probe.gemm_n = 64;
  options.probe.gemm_k = 64;
  options.outputs.json = TempPath("sweep.json");
  options.outputs.markdown = TempPath("sweep.md");
  options.outputs.svg_prefix = TempPath("sweep");
  options.commit = "test";
  options.machine = "test machine";
  options.command = "blossom-bench sweep (test)";
  std::ostringstream log;
  absl::StatusOr<SweepReport> report = RunSweepCommand(options, &log);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(Count(log.str(), "*** Performance stats:"), 3);
  EXPECT_EQ(Count(log.str(), "Throughput per token including tokenize: "), 3);

  absl::StatusOr<std::string> text = ReadFileToString(options.outputs.json);
  ASSERT_TRUE(text.ok()) << text.status();
  nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["schema"], kSweepSchema);
  EXPECT_EQ(j["machine"], "test machine");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["model"]["hidden_size"], 64);
  EXPECT_EQ(j["model"]["n_layer"], 2);
  EXPECT_GT(j["hardware"]["mem_bandwidth_gbs"].get<double>(), 0.0);
  EXPECT_GT(j["hardware"]["gemm_tflops"].get<double>(), 0.0);
  EXPECT_GT(j["start_to_ready_s"].get<double>(), 0.0);
  ASSERT_EQ(j["results"].size(), 3u);
  double last = 0.0;
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json& b = j["results"][i];
    const int bs = 1 << i;
    EXPECT_EQ(b["batch_size"], bs);
    EXPECT_EQ(b["generated_tokens"], 2 * bs * 4);
    EXPECT_EQ(b["seed"]["generate_tokens"], 2 * bs * 4);
    EXPECT_GT(b["seed"]["throughput_ms_per_token"].get<double>(), 0.0);
    EXPECT_GT(b["seed"]["generate_s"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(
        b["seed"]["start_to_finish_s"].get<double>(),
        b["seed"]["start_to_ready_s"].get<double>() + b["seed"]["generate_s"].get<double>());
    EXPECT_GT(b["tokens_per_second"].get<double>(), 0.0);
    for (const char* key : {"mean", "p50", "p90", "p99"}) {
      EXPECT_TRUE(b["prefill_ms"].contains(key));
      EXPECT_GT(b["decode_ms_per_token"][key].get<double>(), 0.0) << key;
    }
    for (const char* key :
         {"memory_floor_ms", "compute_floor_ms", "floor_ms", "bound", "measured_step_ms",
          "memory_fraction", "compute_fraction", "fraction", "bytes_per_step", "flops_per_step"}) {
      EXPECT_TRUE(b["roofline"].contains(key)) << key;
    }
    ASSERT_EQ(b["cycles"].size(), 2u);
    for (const nlohmann::json& c : b["cycles"]) {
      EXPECT_EQ(c["generated_tokens"], bs * 4);
      EXPECT_EQ(c["decode_steps"], 3);
      for (const char* key :
           {"start_s", "tokenized_s", "first_token_s", "prefill_done_s", "end_s"}) {
        const double t = c[key].get<double>();
        EXPECT_LE(last, t) << key;
        last = t;
      }
    }
  }

  for (const char* suffix : {"-throughput.svg", "-latency.svg", "-roofline.svg"}) {
    absl::StatusOr<std::string> svg = ReadFileToString(options.outputs.svg_prefix + suffix);
    ASSERT_TRUE(svg.ok()) << suffix;
    EXPECT_EQ(svg->rfind("<?xml", 0), 0u);
    EXPECT_NE(svg->find("</svg>"), std::string::npos);
    EXPECT_GE(Count(*svg, "<polyline"), 2) << suffix;
    EXPECT_EQ(Count(*svg, "<polyline"), Count(*svg, "</polyline>"));
  }
  EXPECT_EQ(Count(*ReadFileToString(options.outputs.svg_prefix + "-latency.svg"), "<polyline"), 5);
  absl::StatusOr<std::string> md = ReadFileToString(options.outputs.markdown);
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->rfind("| bs |", 0), 0u);
  EXPECT_EQ(Count(*md, "\n| "), 3);  // one row per batch size (the separator starts "|-")
}

// The step graphs must cover the longest prompt: with --prompt-tokens 2048 a context limit of
// 1024 + max_new_tokens made every decode step of the sweep run uncaptured.
TEST(SweepMaxContextTest, CoversThePromptAndTheNewTokens) {
  SweepOptions sweep;
  sweep.max_new_tokens = 100;
  EXPECT_EQ(SweepMaxContext(sweep), 1124);  // the seed's short prompts
  sweep.prompt_tokens = 2048;
  EXPECT_EQ(SweepMaxContext(sweep), 2148);
  sweep.prompt_tokens = 500;
  sweep.max_new_tokens = 4;
  EXPECT_EQ(SweepMaxContext(sweep), 1028);
}

TEST(SweepThreadsTest, AsTheModelRunnerStartsThem) {
  EXPECT_EQ(SweepThreads(0, 1, 3), 3);
  EXPECT_EQ(SweepThreads(0, 2, 5), 4);   // 2 per rank
  EXPECT_EQ(SweepThreads(0, 4, 2), 4);   // at least 1 per rank
  EXPECT_EQ(SweepThreads(3, 2, 64), 6);  // --threads wins
}

// The threads recorded (and given to the CPU probe) are the CPUs this process may use, as the
// model runner counts them, not std::thread::hardware_concurrency(): pinned to one CPU, 1.
TEST(SweepCommandTest, ThreadsFollowTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  if (CPU_COUNT(&saved) < 2) GTEST_SKIP() << "one CPU only: nothing to restrict";
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  SweepCommandOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.sweep.batch_sizes = {1};
  options.sweep.max_new_tokens = 2;
  options.sweep.cycles = 1;
  options.sweep.warmup = 0;
  options.overrides.mem_bandwidth_gbs = 10;  // no probe needed
  options.overrides.peak_tflops = 1;
  const int usable = UsableCpus();
  absl::StatusOr<SweepReport> report = RunSweepCommand(options, nullptr);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(usable, 1);
  EXPECT_EQ(report->context.threads, 1);
}

TEST(SweepCommandTest, MissingModelIsAnError) {
  SweepCommandOptions options;
  EXPECT_EQ(RunSweepCommand(options, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  options.model_dir = "/nonexistent/model";
  EXPECT_FALSE(RunSweepCommand(options, nullptr).ok());
  // Output paths are checked before loading anything.
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.outputs.json = TempPath("no/such/dir/out.json");
  absl::Status s = RunSweepCommand(options, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s;
}

// Options no sweep could run with are refused before the model loads (minutes on a large
// checkpoint): the model here does not exist, and the error is still the option's.
TEST(SweepCommandTest, BadOptionsAreRefusedBeforeLoading) {
  for (auto mutate : std::vector<void (*)(SweepCommandOptions&)>{
           [](SweepCommandOptions& o) { o.sweep.max_new_tokens = 1; },
           [](SweepCommandOptions& o) { o.sweep.cycles = 0; },
           [](SweepCommandOptions& o) { o.sweep.warmup = -1; },
           [](SweepCommandOptions& o) { o.threads = -1; },
           [](SweepCommandOptions& o) { o.overrides.mem_bandwidth_gbs = -1; },
           [](SweepCommandOptions& o) { o.overrides.peak_tflops = -2; }}) {
    SweepCommandOptions options;
    options.model_dir = "/nonexistent/model";
    options.sweep.batch_sizes = {1};
    mutate(options);
    const absl::Status s = RunSweepCommand(options, nullptr).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message().find("nonexistent"), std::string::npos) << s;
    EXPECT_EQ(ValidateSweepCommandOptions(options).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(SweepCommandTest, UnknownBackendIsAnError) {
  SweepCommandOptions options;
  options.model_dir = FixturePath("models/bloom-tiny-h4");
  options.backend = "tpu";
  absl::Status s = RunSweepCommand(options, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("tpu"), std::string::npos) << s;
}

}  // namespace
}  // namespace blossom
