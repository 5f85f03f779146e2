#include "benchmarks/sweep_report.h"

#include "gtest/gtest.h"

namespace blossom {
namespace {

SweepReport ExampleReport() {
  SweepContext c;
  c.date_utc = "2026-11-21T21:00:00Z";
  c.command = "blossom-bench sweep --model m";
  c.commit = "abc1234";
  c.machine = "CPU, 2 cores, no GPU";
  c.backend = "cpu";
  c.threads = 2;
  c.model_dir = "m";
  c.shape = BloomShape{"loaded", 4, 1, 2, 10};  // 300 params (see roofline_test)
  c.weight_dtype = DType::kBF16;
  c.kv_dtype = DType::kF32;
  c.load_s = 0.5;
  c.start_to_ready_s = 0.75;
  c.rates = HardwareRates{100.0, 1000.0, "measured: x", "measured: y"};
  SweepRun run;
  run.options.batch_sizes = {1, 2};
  run.options.max_new_tokens = 10;
  run.options.cycles = 1;
  for (int32_t bs : {1, 2}) {
    BatchResult b;
    b.batch_size = bs;
    b.prompt_lengths.assign(bs, 3);
    b.cycles = {CycleRecord{0.0, 0.1, 0.2, 0.3, 2.0, 3 * bs, 10 * bs, 0.2, 1.7, 9}};
    b.decode_step_s.assign(9, 0.184);
    FinishBatch(10, &b);
    run.batches.push_back(b);
  }
  return BuildSweepReport(c, run);
}

TEST(SweepReportTest, SeedLinesExactly) {
  SweepReport r = ExampleReport();
  const std::string text = FormatBatchStats(r.context, r.run.batches[1], r.roofline[1]);
  EXPECT_EQ(text.substr(0, text.find("Prefill")),
            "\n*** Performance stats:\n"
            "Throughput per token including tokenize: 100.00 msecs\n"
            "Start to ready to generate: 0.750 secs\n"
            "Tokenize and generate 20 (bs=2) tokens: 2.000 secs\n"
            "Start to finish: 2.750 secs\n");
  EXPECT_NE(text.find("Decode per token: p50 184.00 ms, p90 184.00 ms, p99 184.00 ms"),
            std::string::npos);
}

TEST(SweepReportTest, RooflineUsesTheMeanDecodeStep) {
  SweepReport r = ExampleReport();
  ASSERT_EQ(r.roofline.size(), 2u);
  // bs 2: KV tokens per step = 2 * (3 + 10/2) = 16; bytes = 600 + 16 * 32 = 1112 -> 11.12 s.
  EXPECT_DOUBLE_EQ(r.roofline[1].kv_tokens_per_step, 16.0);
  EXPECT_DOUBLE_EQ(r.roofline[1].memory_floor_s, 11.12);
  EXPECT_DOUBLE_EQ(r.roofline[1].compute_floor_s, 1.2);
  EXPECT_NEAR(r.roofline[1].measured_step_s, 0.184, 1e-12);
}

TEST(SweepReportTest, JsonHasEveryDocumentedField) {
  nlohmann::json j = SweepReportToJson(ExampleReport());
  for (const char* key :
       {"schema", "date_utc", "command", "commit", "machine", "backend", "threads", "model",
        "settings", "hardware", "start_to_ready_s", "results"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["schema"], kSweepSchema);
  EXPECT_EQ(j["model"]["params"], 300);
  EXPECT_EQ(j["hardware"]["mem_bandwidth_gbs"], 100.0 / 1e9);
  ASSERT_EQ(j["results"].size(), 2u);
  const nlohmann::json& b = j["results"][1];
  for (const char* key :
       {"batch_size", "prompt_lengths", "seed", "generated_tokens", "timed_s", "tokens_per_second",
        "decode_tokens_per_second", "prefill_ms", "decode_ms_per_token", "roofline", "cycles"}) {
    EXPECT_TRUE(b.contains(key)) << key;
  }
  EXPECT_EQ(b["seed"]["generate_tokens"], 20);
  EXPECT_DOUBLE_EQ(b["seed"]["throughput_ms_per_token"].get<double>(), 100.0);
  EXPECT_EQ(b["roofline"]["bound"], "memory");
  EXPECT_EQ(b["cycles"][0]["generated_tokens"], 20);
  // Two prompts of 3 tokens: 2 * 1544 FLOPs (roofline_test's worked example) against 1000
  // FLOP/s, prefill p50 200 ms.
  EXPECT_DOUBLE_EQ(b["prefill_roofline"]["flops"].get<double>(), 3088.0);
  EXPECT_DOUBLE_EQ(b["prefill_roofline"]["compute_floor_ms"].get<double>(), 3088.0);
  EXPECT_DOUBLE_EQ(b["prefill_roofline"]["measured_p50_ms"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(b["prefill_roofline"]["fraction_of_gemm_rate"].get<double>(), 3.088 / 0.2);
  EXPECT_EQ(j["settings"]["prompt_tokens"], 0);
  for (const char* key : {"mean", "p50", "p90", "p99"}) {
    EXPECT_TRUE(b["decode_ms_per_token"].contains(key)) << key;
  }
}

TEST(SweepReportTest, MarkdownAndCharts) {
  SweepReport r = ExampleReport();
  const std::string md = SweepReportToMarkdown(r);
  EXPECT_NE(md.find("| 1 | "), std::string::npos);
  EXPECT_NE(md.find("| 2 | 100.00 | 2.000 |"), std::string::npos);
  auto charts = SweepCharts(r);
  ASSERT_EQ(charts.size(), 3u);
  EXPECT_EQ(charts[0].first, "throughput");
  for (const auto& [name, chart] : charts) {
    for (const ChartSeries& s : chart.series) EXPECT_EQ(s.points.size(), 2u) << name << s.name;
  }
}

}  // namespace
}  // namespace blossom
