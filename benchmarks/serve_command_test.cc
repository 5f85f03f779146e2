// `blossom-bench serve` end to end against the real gRPC service in-process (CPU, fixture
// model), with prompts cut from the fixture corpus through the server's Tokenize.
#include "benchmarks/serve_command.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "server/testing/in_process_server.h"
#include "engine/loader/file_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

// tests/fixtures/corpus.txt is not exported to other packages, so the test writes a small
// corpus of its own (mixed scripts, to exercise UTF-8-safe cuts).
std::string CorpusPath() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/corpus.txt";
  EXPECT_TRUE(WriteStringToFile(
                  path,
                  "The model predicts the next token given all the previous tokens.\n"
                  "Numbers such as 3.14159 and 1,000,000 appear in many documents.\n"
                  "\xc2\xab Bonjour \xc2\xbb, dit-elle avec un sourire. Nous irons \xc3\xa0 la plage.\n"
                  "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e and English words, mixed in one line.\n")
                  .ok());
  return path;
}

ServeCommandOptions Options(const std::string& target) {
  ServeCommandOptions options;
  ServeSettings& s = options.settings;
  s.target = target;
  s.http_api = "tgi";
  s.num_requests = 30;
  s.request_rate = 200;
  s.arrival = "gamma";
  s.burstiness = 0.5;
  s.max_concurrency = 8;
  s.prompt_len_dist = "uniform:4:24";
  s.output_len_dist = "uniform:2:8";
  s.prompt_kind = "text";
  s.seed = 5;
  s.corpus = CorpusPath();
  s.slo.ttft_ms = 1e6;  // generous: every request meets it
  options.command = "blossom-bench serve (test)";
  options.machine = "test";
  return options;
}

TEST(ServeCommandTest, GrpcRunWritesJsonAndCharts) {
  testing::InProcessServer server;
  server.Load();
  ServeCommandOptions options = Options("grpc://" + server.address());
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  options.outputs.json = dir + "/serve.json";
  options.outputs.svg_prefix = dir + "/serve";
  options.outputs.markdown = dir + "/serve.md";
  std::ostringstream log;
  auto report = RunServeCommand(options, &log);
  ASSERT_TRUE(report.ok()) << report.status();
  const ServingSummary& s = report->summary;
  EXPECT_EQ(s.completed, 30) << log.str();
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.output_length_mismatches, 0);
  EXPECT_EQ(s.good_requests, 30);
  EXPECT_LE(s.ttft_ms.median, s.ttft_ms.p99);
  EXPECT_LE(s.e2e_ms.median, s.e2e_ms.p99);
  EXPECT_GT(report->prompts_exact, 0);
  EXPECT_NE(log.str().find("Serving Benchmark Result"), std::string::npos);

  auto text = ReadFileToString(options.outputs.json);
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["schema"], "blossom-bench-serve/1");
  EXPECT_EQ(j["target"]["protocol"], "grpc");
  EXPECT_EQ(j["server"]["model_id"], "bloom-tiny-h4");
  EXPECT_EQ(j["settings"]["prompt_len_dist"], "uniform:4:24");
  EXPECT_EQ(j["requests"].size(), 30u);
  int64_t output_tokens = 0;
  for (const auto& r : j["requests"]) {
    EXPECT_EQ(r["output_tokens"], r["expected_output_tokens"]);
    EXPECT_GE(r["prompt_tokens"].get<int>(), 1);
    output_tokens += r["output_tokens"].get<int64_t>();
  }
  EXPECT_EQ(j["summary"]["total_output_tokens"], output_tokens);
  for (const char* suffix : {"-latency-cdf.svg", "-tpot-cdf.svg", "-timeline.svg"}) {
    auto svg = ReadFileToString(options.outputs.svg_prefix + suffix);
    ASSERT_TRUE(svg.ok()) << suffix;
    EXPECT_NE(svg->find("<polyline"), std::string::npos);
  }
  EXPECT_EQ(GetPathKind(options.outputs.markdown), PathKind::kRegularFile);
}

TEST(ServeCommandTest, TokenIdPromptsAreExactAndRequestsAllAtOnceWork) {
  testing::InProcessServer server;
  server.Load();
  ServeCommandOptions options = Options("grpc://" + server.address());
  options.settings.prompt_kind = "ids";
  options.settings.request_rate = std::numeric_limits<double>::infinity();
  options.settings.max_concurrency = 0;
  options.settings.arrival = "";  // not given, burstiness 1: poisson
  options.settings.burstiness = 1.0;
  options.settings.num_requests = 12;
  auto report = RunServeCommand(options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->prompts_exact, 12);
  EXPECT_EQ(report->summary.completed, 12);
  EXPECT_EQ(report->settings.arrival, "poisson");
  EXPECT_EQ(report->settings.burstiness, 1.0);
  for (const RequestRecord& r : report->records) EXPECT_EQ(r.scheduled_s, 0.0);
}

// vLLM has only --burstiness: given alone (no --arrival) it means gamma arrivals, not a
// silently ignored flag.
TEST(ServeCommandTest, BurstinessWithoutArrivalMeansGamma) {
  testing::InProcessServer server;
  server.Load();
  ServeCommandOptions options = Options("grpc://" + server.address());
  options.settings.arrival = "";
  options.settings.burstiness = 0.5;
  options.settings.num_requests = 4;
  auto report = RunServeCommand(options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->settings.arrival, "gamma");
  EXPECT_EQ(report->settings.burstiness, 0.5);
  EXPECT_EQ(report->summary.completed, 4);
}

// A run where every timed request failed measured nothing: an error (exit code 1), with the
// reasons, and the JSON still written (distributions null, not zeros).
TEST(ServeCommandTest, NoSuccessfulRequestIsAnError) {
  testing::InProcessServer server;
  server.Load();
  ServeCommandOptions options = Options("grpc://" + server.address());
  options.warmup = false;               // the warm-up would fail first
  options.settings.model = "no-such-model";  // every GenerateStream: NOT_FOUND
  options.settings.num_requests = 3;
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  options.outputs.json = dir + "/failed.json";
  std::ostringstream log;
  auto report = RunServeCommand(options, &log);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(report.status().message().find("no request succeeded: all 3 failed (grpc NOT_FOUND x3)"),
            std::string::npos)
      << report.status();
  EXPECT_NE(log.str().find("Failed requests:                         3"), std::string::npos)
      << log.str();
  auto text = ReadFileToString(options.outputs.json);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["summary"]["completed"], 0);
  EXPECT_TRUE(j["summary"]["ttft_ms"].is_null());
  EXPECT_TRUE(j["summary"]["e2e_ms"].is_null());
}

TEST(ServeCommandTest, RejectsBadSettingsBeforeConnecting) {
  // Nothing listens on port 1; validation must fail first, with the flag named.
  for (auto mutate : std::vector<void (*)(ServeCommandOptions&)>{
           [](ServeCommandOptions& o) { o.settings.target = "tcp://x:1"; },
           [](ServeCommandOptions& o) { o.settings.prompt_len_dist = "fixed:0"; },
           [](ServeCommandOptions& o) { o.settings.arrival = "uniform"; },
           [](ServeCommandOptions& o) { o.settings.request_rate = 0; },
           [](ServeCommandOptions& o) { o.settings.num_requests = 0; },
           [](ServeCommandOptions& o) { o.outputs.json = "/nonexistent/dir/x.json"; },
           [](ServeCommandOptions& o) { o.request_timeout_s = -1; },
           [](ServeCommandOptions& o) { o.request_timeout_s = std::nan(""); },
           [](ServeCommandOptions& o) {
             o.settings.arrival = "poisson";  // given explicitly: contradicts the burstiness
             o.settings.burstiness = 0.5;
           },
           [](ServeCommandOptions& o) {
             o.settings.arrival = "";
             o.settings.burstiness = 0;
           },
           [](ServeCommandOptions& o) {
             o.settings.target = "http://127.0.0.1:1";
             o.settings.prompt_kind = "ids";
           },
           // A negative objective would turn goodput into throughput without a word.
           [](ServeCommandOptions& o) { o.settings.slo.tpot_ms = -5; },
           [](ServeCommandOptions& o) { o.settings.http_api = "foo"; }}) {
    ServeCommandOptions options = Options("grpc://127.0.0.1:1");
    mutate(options);
    auto report = RunServeCommand(options, nullptr);
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  }
  ServeCommandOptions options = Options("grpc://127.0.0.1:1");
  options.request_timeout_s = -1;
  EXPECT_NE(RunServeCommand(options, nullptr).status().message().find(
                "--request-timeout -1: must be >= 0 seconds"),
            std::string::npos);
  options = Options("grpc://127.0.0.1:1");
  options.settings.arrival = "poisson";
  options.settings.burstiness = 0.5;
  EXPECT_NE(RunServeCommand(options, nullptr).status().message().find(
                "--arrival poisson has burstiness 1, but --burstiness 0.5 was given"),
            std::string::npos);
}

}  // namespace
}  // namespace blossom
