#include "benchmarks/serve_report.h"

#include <limits>

#include "gtest/gtest.h"

namespace blossom {
namespace {

RequestRecord Ok(int index, double send, std::vector<double> tokens) {
  RequestRecord r;
  r.index = index;
  r.send_s = r.scheduled_s = send;
  r.token_times_s = tokens;
  r.first_token_s = tokens.front();
  r.end_s = tokens.back();
  r.prompt_tokens = 4;
  r.output_tokens = static_cast<int32_t>(tokens.size());
  r.expected_output_tokens = r.output_tokens;
  r.success = true;
  return r;
}

ServeReport Example(const Slo& slo) {
  ServeReport report;
  report.date_utc = "2026-11-21T21:00:00Z";
  report.command = "blossom-bench serve ...";
  report.settings.target = "grpc://127.0.0.1:1";
  report.settings.protocol = "grpc";
  report.settings.num_requests = 3;
  report.settings.request_rate = std::numeric_limits<double>::infinity();
  report.settings.arrival = "poisson";
  report.settings.slo = slo;
  RequestRecord failed;
  failed.index = 2;
  failed.error = "grpc RESOURCE_EXHAUSTED: queue full";
  report.records = {Ok(0, 0.0, {0.1, 0.2, 0.3}), Ok(1, 0.5, {0.7, 0.8}), failed};
  report.summary = SummarizeRequests(report.records, 1.0, slo);
  return report;
}

TEST(ServeReportTest, TableHasVllmLabels) {
  const std::string table = FormatServeTable(Example(Slo{}));
  EXPECT_NE(table.find("============ Serving Benchmark Result ============"), std::string::npos)
      << table;
  EXPECT_NE(table.find("Successful requests:                     2"), std::string::npos) << table;
  EXPECT_NE(table.find("  grpc RESOURCE_EXHAUSTED:"), std::string::npos);
  EXPECT_NE(table.find("Request rate configured (RPS):           inf"), std::string::npos);
  EXPECT_NE(table.find("Median TTFT (ms):                        150.00"), std::string::npos)
      << table;
  EXPECT_NE(table.find("Mean TPOT (ms):"), std::string::npos);
  EXPECT_NE(table.find("P99 ITL (ms):"), std::string::npos);
  EXPECT_NE(table.find("P90 E2EL (ms):"), std::string::npos);
  EXPECT_EQ(table.find("goodput"), std::string::npos);  // no SLO given
  Slo slo;
  slo.ttft_ms = 150;
  EXPECT_NE(FormatServeTable(Example(slo)).find("Request goodput (req/s):                 1.00"),
            std::string::npos);
}

// Outputs shorter (or longer) than asked make the run incomparable: the table and the Markdown
// say so, not only the JSON's count.
TEST(ServeReportTest, OutputsOfAnotherLengthAreAWarning) {
  ServeReport report = Example(Slo{});
  EXPECT_EQ(FormatServeTable(report).find("WARNING"), std::string::npos);
  EXPECT_EQ(ServeReportToMarkdown(report).find("another length"), std::string::npos);
  report.records[0].expected_output_tokens = 11;  // the server gave 3
  report.summary = SummarizeRequests(report.records, 1.0, Slo{});
  const std::string table = FormatServeTable(report);
  EXPECT_NE(table.find("WARNING outputs of another length:       1"), std::string::npos) << table;
  EXPECT_NE(ServeReportToMarkdown(report).find("| **outputs of another length than asked** | 1"),
            std::string::npos);
}

TEST(ServeReportTest, JsonFollowsTheSchema) {
  Slo slo;
  slo.e2e_ms = 1000;
  const nlohmann::json j = ServeReportToJson(Example(slo));
  EXPECT_EQ(j["schema"], "blossom-bench-serve/1");
  EXPECT_TRUE(j["settings"]["request_rate"].is_null());
  EXPECT_EQ(j["settings"]["slo_ms"]["e2e"], 1000.0);
  EXPECT_TRUE(j["settings"]["slo_ms"]["ttft"].is_null());
  EXPECT_TRUE(j["target"]["http_api"].is_null());
  EXPECT_EQ(j["summary"]["completed"], 2);
  EXPECT_EQ(j["summary"]["failures"]["grpc RESOURCE_EXHAUSTED"], 1);
  EXPECT_EQ(j["summary"]["good_requests"], 2);
  EXPECT_NEAR(j["summary"]["ttft_ms"]["median"].get<double>(), 150, 1e-9);
  ASSERT_EQ(j["requests"].size(), 3u);
  EXPECT_EQ(j["requests"][0]["itl_ms"].size(), 2u);
  EXPECT_NEAR(j["requests"][0]["tpot_ms"].get<double>(), 100, 1e-9);
  EXPECT_TRUE(j["requests"][2]["ttft_ms"].is_null());
  EXPECT_EQ(j["requests"][2]["success"], false);
}

TEST(ServeReportTest, WrittenJsonParsesToTheSameDocumentWithOneLinePerRequest) {
  const ServeReport report = Example(Slo{});
  const std::string text = ServeJsonText(report);
  EXPECT_EQ(nlohmann::json::parse(text), ServeReportToJson(report));
  EXPECT_NE(text.find("\n    {\"e2e_ms\""), std::string::npos) << text;
  ServeReport empty = report;
  empty.records.clear();
  EXPECT_EQ(nlohmann::json::parse(ServeJsonText(empty))["requests"].size(), 0u);
}

TEST(ServeReportTest, ChartsAndMarkdown) {
  const ServeReport report = Example(Slo{});
  const auto charts = ServeCharts(report);
  ASSERT_EQ(charts.size(), 3u);
  EXPECT_EQ(charts[0].first, "-latency-cdf");
  for (const auto& [suffix, chart] : charts) {
    ASSERT_EQ(chart.series.size(), 2u) << suffix;
    EXPECT_FALSE(chart.series[0].points.empty()) << suffix;
  }
  EXPECT_EQ(charts[0].second.series[0].points.back().second, 1.0);  // a CDF ends at 1
  const std::string md = ServeReportToMarkdown(report);
  EXPECT_NE(md.find("| TTFT | "), std::string::npos);
  EXPECT_NE(md.find("| successful / failed requests | 2 / 1 |"), std::string::npos) << md;
}

// With no successful request the distributions are empty: null in the JSON and "n/a" in the
// table and markdown, not a measured-looking 0.
TEST(ServeReportTest, EmptyDistributionsAreNullNotZero) {
  ServeReport report = Example(Slo{});
  for (RequestRecord& r : report.records) {
    r.success = false;
    r.error = "http timeout: the request's 1 s deadline (--request-timeout) passed";
  }
  report.summary = SummarizeRequests(report.records, 1.0, Slo{});
  const nlohmann::json j = nlohmann::json::parse(ServeJsonText(report));
  for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    EXPECT_TRUE(j["summary"][key].is_null()) << key << ": " << j["summary"][key];
  }
  EXPECT_EQ(j["summary"]["completed"], 0);
  EXPECT_EQ(j["summary"]["failures"]["http timeout"], 3);
  const std::string table = FormatServeTable(report);
  EXPECT_NE(table.find("Median TTFT (ms):                        n/a"), std::string::npos) << table;
  EXPECT_NE(ServeReportToMarkdown(report).find("| TTFT | n/a | n/a |"), std::string::npos);
  for (const auto& [suffix, chart] : ServeCharts(report)) {
    EXPECT_NE(RenderSvg(chart).find("</svg>"), std::string::npos) << suffix;
  }
  // A distribution with values keeps its numbers.
  EXPECT_EQ(ServeReportToJson(Example(Slo{}))["summary"]["ttft_ms"]["count"], 2);
}

// An error text with invalid UTF-8 (a server's reply cut mid-character, a binary body) is
// written with U+FFFD in its place: the strict dump threw and lost the whole report.
TEST(ServeReportTest, InvalidUtf8InAnErrorIsReplacedNotThrown) {
  ServeReport report = Example(Slo{});
  report.records[2].error = "http 502: caf\xc3";
  report.summary = SummarizeRequests(report.records, 1.0, Slo{});
  std::string text;
  ASSERT_NO_THROW(text = ServeJsonText(report));
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["requests"][2]["error"], "http 502: caf\xef\xbf\xbd");
}

}  // namespace
}  // namespace blossom
