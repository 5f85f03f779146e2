#include "server/metrics/metrics.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/metrics/promtool_test_util.h"

namespace blossom::metrics {
namespace {

TEST(FormatValueTest, PrometheusSpellings) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-0.0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(1e6), "1000000");  // no "1e+06" for integers
  EXPECT_EQ(FormatValue(800000), "800000");
  EXPECT_EQ(FormatValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(1e-5), "1e-05");
  EXPECT_EQ(FormatValue(2.5e20), "2.5e+20");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  // Shortest round trip: parses back to the same double.
  EXPECT_EQ(std::strtod(FormatValue(0.1 + 0.2).c_str(), nullptr), 0.1 + 0.2);
}

TEST(CounterTest, OnlyGoesUp) {
  Counter c;
  c.Increment();
  c.Increment(2.5);
  c.Increment(-1);           // ignored
  c.Increment(std::nan(""));  // ignored
  EXPECT_EQ(c.value(), 3.5);
}

TEST(GaugeTest, SetAndAdd) {
  Gauge g;
  g.Set(4);
  g.Add(-1.5);
  EXPECT_EQ(g.value(), 2.5);
}

TEST(HistogramTest, ValueEqualToBoundGoesIntoThatBucket) {
  Histogram h({1, 2, 4});
  h.Observe(1);    // le=1 (inclusive)
  h.Observe(1.5);  // le=2
  h.Observe(2);    // le=2
  h.Observe(4);    // le=4
  h.Observe(4.0000001);  // +Inf
  h.Observe(-10);  // le=1
  EXPECT_EQ(h.bucket_counts(), (std::vector<uint64_t>{2, 2, 1, 1}));
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{2, 4, 5, 6}));
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 1 + 1.5 + 2 + 4 + 4.0000001 - 10);
}

TEST(HistogramTest, NanGoesToInfBucket) {
  Histogram h({1});
  h.Observe(std::nan(""));
  EXPECT_EQ(h.bucket_counts(), (std::vector<uint64_t>{0, 1}));
  EXPECT_TRUE(std::isnan(h.sum()));
}

TEST(BucketsTest, ExponentialAndLinear) {
  EXPECT_EQ(ExponentialBuckets(0.5, 2, 4), (std::vector<double>{0.5, 1, 2, 4}));
  EXPECT_EQ(ExponentialBuckets(1, 1, 3), std::vector<double>{});   // factor must be > 1
  EXPECT_EQ(ExponentialBuckets(0, 2, 3), std::vector<double>{});   // start must be > 0
  EXPECT_EQ(ExponentialBuckets(1, 2, 0), std::vector<double>{});
  EXPECT_EQ(LinearBuckets(-1, 0.5, 4), (std::vector<double>{-1, -0.5, 0, 0.5}));
  EXPECT_EQ(LinearBuckets(0, 0, 4), std::vector<double>{});
}

TEST(RegistryTest, RendersCounterGolden) {
  Registry r;
  auto& plain = r.AddCounter("blossom_prompt_tokens_total", "Prompt tokens processed.");
  auto& by_reason = r.AddCounter("blossom_request_success_total", "Finished requests.",
                                 {"finished_reason", "model"});
  plain.Get().Increment(1234);
  by_reason.Get({"stop", "bloom"}).Increment();
  by_reason.Get({"length", "bloom"}).Increment(2);
  EXPECT_EQ(r.Render(),
            "# HELP blossom_prompt_tokens_total Prompt tokens processed.\n"
            "# TYPE blossom_prompt_tokens_total counter\n"
            "blossom_prompt_tokens_total 1234\n"
            "# HELP blossom_request_success_total Finished requests.\n"
            "# TYPE blossom_request_success_total counter\n"
            "blossom_request_success_total{finished_reason=\"length\",model=\"bloom\"} 2\n"
            "blossom_request_success_total{finished_reason=\"stop\",model=\"bloom\"} 1\n");
  EXPECT_TRUE(r.errors().empty());
}

TEST(RegistryTest, RendersGaugeGoldenWithSpecialValues) {
  Registry r;
  auto& g = r.AddGauge("kv_cache_usage_perc", "KV usage, 0..1.", {"pool"});
  g.Get({"a"}).Set(0.25);
  g.Get({"b"}).Set(std::numeric_limits<double>::infinity());
  g.Get({"c"}).Set(-std::numeric_limits<double>::infinity());
  g.Get({"d"}).Set(std::nan(""));
  EXPECT_EQ(r.Render(),
            "# HELP kv_cache_usage_perc KV usage, 0..1.\n"
            "# TYPE kv_cache_usage_perc gauge\n"
            "kv_cache_usage_perc{pool=\"a\"} 0.25\n"
            "kv_cache_usage_perc{pool=\"b\"} +Inf\n"
            "kv_cache_usage_perc{pool=\"c\"} -Inf\n"
            "kv_cache_usage_perc{pool=\"d\"} NaN\n");
}

TEST(RegistryTest, RendersHistogramGolden) {
  Registry r;
  auto& h = r.AddHistogram("ttft_seconds", "Time to first token.", {0.005, 0.5, 1, 2.5});
  auto& labelled =
      r.AddHistogram("step_seconds", "Step time.", {0.1}, {"phase"});
  h.Get().Observe(0.005);  // exactly on a bound: le="0.005"
  h.Get().Observe(0.75);
  h.Get().Observe(3);
  labelled.Get({"decode"}).Observe(0.25);
  EXPECT_EQ(r.Render(),
            "# HELP step_seconds Step time.\n"
            "# TYPE step_seconds histogram\n"
            "step_seconds_bucket{phase=\"decode\",le=\"0.1\"} 0\n"
            "step_seconds_bucket{phase=\"decode\",le=\"+Inf\"} 1\n"
            "step_seconds_sum{phase=\"decode\"} 0.25\n"
            "step_seconds_count{phase=\"decode\"} 1\n"
            "# HELP ttft_seconds Time to first token.\n"
            "# TYPE ttft_seconds histogram\n"
            "ttft_seconds_bucket{le=\"0.005\"} 1\n"
            "ttft_seconds_bucket{le=\"0.5\"} 1\n"
            "ttft_seconds_bucket{le=\"1\"} 2\n"
            "ttft_seconds_bucket{le=\"2.5\"} 2\n"
            "ttft_seconds_bucket{le=\"+Inf\"} 3\n"
            "ttft_seconds_sum 3.755\n"
            "ttft_seconds_count 3\n");
}

TEST(RegistryTest, FamilyWithoutChildrenRendersOnlyHeader) {
  Registry r;
  r.AddCounter("x_total", "", {"a"});  // empty help: no HELP line
  EXPECT_EQ(r.Render(), "# TYPE x_total counter\n");
}

TEST(RegistryTest, EscapesLabelValuesAndHelp) {
  Registry r;
  auto& c = r.AddCounter("esc_total", "Back\\slash, \"quotes\" stay,\nnew line.", {"v"});
  c.Get({"a\\b\"c\nd"}).Increment();
  EXPECT_EQ(r.Render(),
            "# HELP esc_total Back\\\\slash, \"quotes\" stay,\\nnew line.\n"
            "# TYPE esc_total counter\n"
            "esc_total{v=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(RegistryTest, GetReturnsStableReferences) {
  Registry r;
  auto& f = r.AddGauge("g", "g", {"k"});
  Gauge* first = &f.Get({"x"});
  for (int i = 0; i < 1000; ++i) f.Get({std::to_string(i)});  // rehash/rebalance pressure
  EXPECT_EQ(&f.Get({"x"}), first);
}

TEST(RegistryTest, WrongLabelCountIsPaddedOrTruncated) {
  Registry r;
  auto& f = r.AddCounter("c_total", "c", {"a", "b"});
  f.Get({"x"}).Increment();            // padded to {"x", ""}
  f.Get({"x", "", "extra"}).Increment();  // truncated to {"x", ""}: the same child
  EXPECT_EQ(&f.Get({"x"}), &f.Get({"x", ""}));
  EXPECT_EQ(f.Get({"x", ""}).value(), 2);
  EXPECT_EQ(r.Render(),
            "# HELP c_total c\n# TYPE c_total counter\nc_total{a=\"x\",b=\"\"} 2\n");
}

TEST(RegistryTest, InvalidNamesAreRecordedAndNotExported) {
  Registry r;
  const char* bad_metric_names[] = {"", "9lives", "has-dash", "spa ce", "ünï"};
  for (const char* name : bad_metric_names) r.AddCounter(name, "h").Get().Increment();
  r.AddGauge("ok_gauge", "h", {"bad:colon"}).Get({"v"}).Set(1);
  r.AddGauge("ok_gauge2", "h", {"__reserved"}).Get({"v"}).Set(1);
  r.AddGauge("ok_gauge3", "h", {"a", "a"}).Get({"v", "w"}).Set(1);
  r.AddHistogram("ok_hist", "h", {1}, {"le"}).Get({"v"}).Observe(1);
  EXPECT_EQ(r.errors().size(), 9u);
  EXPECT_EQ(r.Render(), "");
  // Colons are fine in metric names (recording rules use them).
  r.AddGauge("ns:ok_gauge", "h").Get().Set(1);
  EXPECT_EQ(r.Render(), "# HELP ns:ok_gauge h\n# TYPE ns:ok_gauge gauge\nns:ok_gauge 1\n");
}

TEST(RegistryTest, SameDefinitionIsSharedConflictIsNotExported) {
  Registry r;
  auto& a = r.AddCounter("dup_total", "h", {"l"});
  auto& b = r.AddCounter("dup_total", "h", {"l"});
  EXPECT_EQ(&a, &b);
  EXPECT_TRUE(r.errors().empty());
  auto& g = r.AddGauge("dup_total", "h", {"l"});  // different type
  g.Get({"x"}).Set(5);
  auto& c = r.AddCounter("dup_total", "h", {"other"});  // different labels
  c.Get({"x"}).Increment();
  EXPECT_EQ(r.errors().size(), 2u);
  a.Get({"x"}).Increment(3);
  EXPECT_EQ(r.Render(), "# HELP dup_total h\n# TYPE dup_total counter\ndup_total{l=\"x\"} 3\n");
}

TEST(RegistryTest, UnsortedBucketsAreSanitized) {
  Registry r;
  auto& h = r.AddHistogram("h_seconds", "h", {2, 1, 1, std::nan(""),
                                              std::numeric_limits<double>::infinity()});
  EXPECT_EQ(r.errors().size(), 1u);
  EXPECT_EQ(h.Get().upper_bounds(), (std::vector<double>{1, 2}));
  // A trailing +Inf alone is accepted silently (it is implicit).
  auto& ok = r.AddHistogram("ok_seconds", "h", {1, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(r.errors().size(), 1u);
  EXPECT_EQ(ok.Get().upper_bounds(), std::vector<double>{1});
}

TEST(RegistryTest, CollectHooksRunAtRenderTime) {
  Registry r;
  auto& g = r.AddGauge("num_requests_running", "Running requests.");
  int engine_running = 3;
  int runs = 0;
  r.AddCollectHook([&] {
    ++runs;
    g.Get().Set(engine_running);
  });
  EXPECT_EQ(r.Render(),
            "# HELP num_requests_running Running requests.\n"
            "# TYPE num_requests_running gauge\nnum_requests_running 3\n");
  engine_running = 7;
  EXPECT_NE(r.Render().find("num_requests_running 7\n"), std::string::npos);
  EXPECT_EQ(runs, 2);
}

TEST(ConcurrencyTest, EightThreadsExactTotals) {
  Registry r;
  auto& counters = r.AddCounter("ops_total", "ops", {"kind"});
  auto& gauge = r.AddGauge("level", "level");
  auto& hist = r.AddHistogram("lat_seconds", "lat", {0.5, 1.5});
  constexpr int kThreads = 8;
  constexpr int kIters = 100000;
  hist.Get();  // exists before the first scrape below
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Get on every iteration for some, cached for others: both paths must be exact.
      Counter& cached = counters.Get({"cached"});
      for (int i = 0; i < kIters; ++i) {
        cached.Increment();
        counters.Get({t % 2 ? "odd" : "even"}).Increment();
        gauge.Get().Add(1);
        hist.Get().Observe(i % 3);  // 0 -> le 0.5, 1 -> le 1.5, 2 -> +Inf
      }
    });
  }
  // Scrapes race with the updates; every render must parse as a consistent histogram.
  for (int i = 0; i < 20; ++i) {
    const std::string text = r.Render();
    EXPECT_NE(text.find("lat_seconds_count"), std::string::npos);
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(counters.Get({"cached"}).value(), kThreads * kIters);
  EXPECT_EQ(counters.Get({"odd"}).value(), kThreads / 2 * kIters);
  EXPECT_EQ(counters.Get({"even"}).value(), kThreads / 2 * kIters);
  EXPECT_EQ(gauge.Get().value(), kThreads * kIters);
  const Histogram& h = hist.Get();
  EXPECT_EQ(h.count(), uint64_t{kThreads} * kIters);
  // i % 3 over 0..99999: 33334 zeros, 33333 ones, 33333 twos per thread.
  EXPECT_EQ(h.bucket_counts(), (std::vector<uint64_t>{8 * 33334, 8 * 33333, 8 * 33333}));
  EXPECT_EQ(h.sum(), 8.0 * (33333 * 1 + 33333 * 2));
  EXPECT_NE(r.Render().find("ops_total{kind=\"cached\"} 800000\n"), std::string::npos);
}

// A registry exercising everything the renderer can emit, lint-clean for promtool.
std::string FullExposition() {
  Registry r;
  r.AddCounter("blossom_generation_tokens_total", "Generated tokens.").Get().Increment(1e6);
  auto& success = r.AddCounter("blossom_request_success_total",
                               "Finished requests by \"reason\"\nsecond line \\ backslash.",
                               {"finished_reason"});
  success.Get({"length"}).Increment(3);
  success.Get({"we\"ird\\va\nlue"}).Increment();
  auto& g = r.AddGauge("blossom_kv_cache_usage_ratio", "KV cache usage.", {"model"});
  g.Get({"bloom"}).Set(0.125);
  g.Get({"inf"}).Set(std::numeric_limits<double>::infinity());
  g.Get({"nan"}).Set(std::nan(""));
  auto& h = r.AddHistogram("blossom_time_to_first_token_seconds", "Time to first token.",
                           ExponentialBuckets(0.001, 2, 12), {"model"});
  for (double v : {0.0005, 0.001, 0.003, 0.1, 1.0, 10.0}) h.Get({"bloom"}).Observe(v);
  r.AddHistogram("blossom_empty_seconds", "No observations.", {0.1, 1}).Get();
  return r.Render();
}

TEST(PromtoolTest, RenderPassesCheckMetrics) {
  const std::string text = FullExposition();
  std::string out;
  const int rc = RunPromtool(text, &out);
  if (rc == -1) GTEST_SKIP() << "promtool not installed (Debian: apt-get install prometheus)";
  EXPECT_EQ(rc, 0) << out << "\n--- input ---\n" << text;
  EXPECT_EQ(out, "");
  // The check is real: a broken exposition fails it.
  std::string bad_out;
  EXPECT_NE(RunPromtool("broken{ 1\n", &bad_out), 0);
}

}  // namespace
}  // namespace blossom::metrics
