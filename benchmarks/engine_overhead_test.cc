// engine_overhead runs the real engine over a model that takes no time; here at a small size:
// every request runs to its length, the decode steps at full batch are found and timed.
#include "benchmarks/engine_overhead.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

TEST(EngineOverheadTest, TimesTheFullBatchDecodeSteps) {
  EngineOverheadOptions options;
  options.model_dir = FixturePath("models/bloom-demo");
  options.batch = 6;
  options.prompt_tokens = 20;
  options.new_tokens = 9;
  absl::StatusOr<EngineOverheadReport> report = RunEngineOverhead(options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->generated_tokens, 6 * 9) << "every request ends by length (EOS is never drawn)";
  // One prefill step (120 tokens fit the 2048-token budget) samples each first token; then 8
  // decode steps of all 6. The engine may schedule the first request before the others are
  // submitted (its forward then waits at the gate): that one runs a step ahead, finishes a step
  // early, and 7 steps have all 6.
  EXPECT_GE(report->full_decode_steps, 7);
  EXPECT_LE(report->full_decode_steps, 8);
  EXPECT_GE(report->steps, 9);
  EXPECT_GT(report->host.median_ms, 0.0);
  EXPECT_LE(report->host.median_ms, report->host.p90_ms);
  EXPECT_GE(report->host.median_ms, report->output.median_ms);
  EXPECT_GT(report->iteration.median_ms, 0.0);
  const std::string json = EngineOverheadJson(options, *report);
  EXPECT_NE(json.find(absl::StrCat("\"full_decode_steps\": ", report->full_decode_steps)),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"host\": {\"median_ms\": "), std::string::npos) << json;
}

TEST(EngineOverheadTest, RefusesSizesThatCannotRun) {
  EngineOverheadOptions options;
  options.model_dir = FixturePath("models/bloom-demo");
  options.new_tokens = 1;
  EXPECT_EQ(RunEngineOverhead(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blossom
