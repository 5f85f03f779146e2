#include "benchmarks/serve_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/loader/file_util.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

using Json = nlohmann::json;

std::string Line(const std::string& label, const std::string& value) {
  return absl::StrFormat("%-40s %-10s\n", label, value);
}
std::string Line(const std::string& label, double value) {
  return absl::StrFormat("%-40s %-10.2f\n", label, value);
}
std::string Rule(const std::string& title, char fill) {
  const size_t width = 50;
  if (title.empty()) return std::string(width, fill) + "\n";
  const size_t left = (width - title.size()) / 2;
  return std::string(left, fill) + title + std::string(width - left - title.size(), fill) + "\n";
}

std::string Rate(double r) { return std::isinf(r) ? "inf" : absl::StrFormat("%g", r); }

// null for an empty distribution (no request succeeded, or none had two tokens for a TPOT):
// zeros would read as a measured 0 ms.
Json DistJson(const Distribution& d) {
  if (d.count == 0) return nullptr;
  return {{"count", d.count}, {"mean", d.mean}, {"median", d.median}, {"p90", d.p90},
          {"p99", d.p99},     {"std", d.std},   {"min", d.min},       {"max", d.max}};
}

// Error texts come from the server and may hold invalid UTF-8 (a reply cut mid-character, a
// binary body): replaced with U+FFFD rather than thrown on, which would lose the whole report.
std::string Dump(const Json& json, int indent) {
  return json.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// A table or markdown cell of an empty distribution: no value rather than a fake 0.
std::string Ms(const Distribution& d, double value) {
  return d.count == 0 ? "n/a" : absl::StrFormat("%.2f", value);
}

// Per-request values are rounded (seconds to 1 us, milliseconds to 1 us) so the per-token lists
// stay short in the file; nlohmann prints the shortest round-trip form, so 0.000123 stays short.
double Us(double seconds) { return std::round(seconds * 1e6) / 1e6; }
double MsUs(double ms) { return std::round(ms * 1e3) / 1e3; }

// Up to ~200 (value, cumulative fraction) points of the empirical CDF.
std::vector<std::pair<double, double>> Cdf(std::vector<double> values) {
  std::vector<std::pair<double, double>> points;
  if (values.empty()) return points;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const size_t step = std::max<size_t>(1, n / 200);
  for (size_t i = 0; i < n; i += step) {
    points.emplace_back(values[i], static_cast<double>(i + 1) / static_cast<double>(n));
  }
  if (points.back().second < 1.0) points.emplace_back(values.back(), 1.0);
  return points;
}

}  // namespace

std::string FormatServeTable(const ServeReport& report) {
  const ServingSummary& s = report.summary;
  std::string out = Rule(" Serving Benchmark Result ", '=');
  out += Line("Successful requests:", absl::StrCat(s.completed));
  out += Line("Failed requests:", absl::StrCat(s.failed));
  for (const auto& [reason, count] : s.failures) {
    out += Line(absl::StrCat("  ", reason, ":"), absl::StrCat(count));
  }
  if (s.output_length_mismatches > 0) {
    // The run is not the one asked for (a server that stops at EOS whatever ignore_eos says, or
    // caps the length): its throughputs compare with nothing measured at the asked lengths.
    out += Line("WARNING outputs of another length:", absl::StrCat(s.output_length_mismatches));
  }
  out += Line("Request rate configured (RPS):", Rate(report.settings.request_rate));
  out += Line("Maximum request concurrency:",
              report.settings.max_concurrency > 0 ? absl::StrCat(report.settings.max_concurrency)
                                                  : "unlimited");
  out += Line("Benchmark duration (s):", s.duration_s);
  out += Line("Total input tokens:", absl::StrCat(s.total_input_tokens));
  out += Line("Total generated tokens:", absl::StrCat(s.total_output_tokens));
  out += Line("Request throughput (req/s):", s.request_throughput);
  if (report.settings.slo.any()) out += Line("Request goodput (req/s):", s.goodput);
  out += Line("Output token throughput (tok/s):", s.output_token_throughput);
  out += Line("Total Token throughput (tok/s):", s.total_token_throughput);
  struct Section {
    const char* title;
    const char* name;
    const Distribution* d;
  };
  for (const Section& sec :
       {Section{"Time to First Token", "TTFT", &s.ttft_ms},
        Section{"Time per Output Token (excl. 1st token)", "TPOT", &s.tpot_ms},
        Section{"Inter-token Latency", "ITL", &s.itl_ms},
        Section{"End-to-end Latency", "E2EL", &s.e2e_ms}}) {
    const Distribution& d = *sec.d;
    out += Rule(sec.title, '-');
    out += Line(absl::StrCat("Mean ", sec.name, " (ms):"), Ms(d, d.mean));
    out += Line(absl::StrCat("Median ", sec.name, " (ms):"), Ms(d, d.median));
    out += Line(absl::StrCat("P90 ", sec.name, " (ms):"), Ms(d, d.p90));
    out += Line(absl::StrCat("P99 ", sec.name, " (ms):"), Ms(d, d.p99));
    out += Line(absl::StrCat("Std ", sec.name, " (ms):"), Ms(d, d.std));
  }
  out += Rule("", '=');
  return out;
}

Json ServeReportToJson(const ServeReport& report) {
  const ServeSettings& st = report.settings;
  const ServingSummary& s = report.summary;
  Json slo = Json::object();
  slo["ttft"] = st.slo.ttft_ms > 0 ? Json(st.slo.ttft_ms) : Json(nullptr);
  slo["tpot"] = st.slo.tpot_ms > 0 ? Json(st.slo.tpot_ms) : Json(nullptr);
  slo["e2e"] = st.slo.e2e_ms > 0 ? Json(st.slo.e2e_ms) : Json(nullptr);
  Json settings = {
      {"num_requests", st.num_requests},
      // JSON has no infinity: null means "all at once".
      {"request_rate", std::isinf(st.request_rate) ? Json(nullptr) : Json(st.request_rate)},
      {"arrival", st.arrival},
      {"burstiness", st.burstiness},
      {"max_concurrency", st.max_concurrency},
      {"prompt_len_dist", st.prompt_len_dist},
      {"output_len_dist", st.output_len_dist},
      {"prompt_kind", st.prompt_kind},
      {"seed", st.seed},
      {"slo_ms", slo},
      {"greedy", true},
      {"ignore_eos", true},
      {"corpus", st.corpus}};
  Json failures = Json::object();
  for (const auto& [reason, count] : s.failures) failures[reason] = count;
  Json summary = {{"requests", s.requests},
                  {"completed", s.completed},
                  {"failed", s.failed},
                  {"failures", failures},
                  {"output_length_mismatches", s.output_length_mismatches},
                  {"duration_s", s.duration_s},
                  {"total_input_tokens", s.total_input_tokens},
                  {"total_output_tokens", s.total_output_tokens},
                  {"request_throughput", s.request_throughput},
                  {"output_token_throughput", s.output_token_throughput},
                  {"total_token_throughput", s.total_token_throughput},
                  {"good_requests", s.good_requests},
                  {"goodput", s.goodput},
                  {"ttft_ms", DistJson(s.ttft_ms)},
                  {"tpot_ms", DistJson(s.tpot_ms)},
                  {"itl_ms", DistJson(s.itl_ms)},
                  {"e2e_ms", DistJson(s.e2e_ms)}};
  Json requests = Json::array();
  for (const RequestRecord& r : report.records) {
    Json itl = Json::array();
    for (size_t i = 1; i < r.token_times_s.size(); ++i) {
      itl.push_back(MsUs((r.token_times_s[i] - r.token_times_s[i - 1]) * 1e3));
    }
    const bool timed = r.success && r.first_token_s >= 0;
    requests.push_back({{"index", r.index},
                        {"scheduled_s", Us(r.scheduled_s)},
                        {"send_s", Us(r.send_s)},
                        {"first_token_s", r.first_token_s >= 0 ? Json(Us(r.first_token_s)) : Json()},
                        {"end_s", Us(r.end_s)},
                        {"prompt_tokens", r.prompt_tokens},
                        {"output_tokens", r.output_tokens},
                        {"expected_output_tokens", r.expected_output_tokens},
                        {"success", r.success},
                        {"error", r.error},
                        {"ttft_ms", timed ? Json(MsUs(TtftMs(r))) : Json()},
                        {"tpot_ms", timed && TpotMs(r) >= 0 ? Json(MsUs(TpotMs(r))) : Json()},
                        {"e2e_ms", timed ? Json(MsUs(E2eMs(r))) : Json()},
                        {"itl_ms", itl}});
  }
  return {{"schema", kServeSchema},
          {"date_utc", report.date_utc},
          {"command", report.command},
          {"commit", report.commit},
          {"machine", report.machine},
          {"target",
           {{"url", st.target},
            {"protocol", st.protocol},
            {"http_api", st.protocol == "http" ? Json(st.http_api) : Json()},
            {"model", st.model}}},
          {"server", report.server},
          {"settings", settings},
          {"prompts", {{"exact_length", report.prompts_exact},
                       {"tokenize_calls", report.tokenize_calls}}},
          {"summary", summary},
          {"requests", requests}};
}

std::string ServeReportToMarkdown(const ServeReport& report) {
  const ServingSummary& s = report.summary;
  std::string out = absl::StrCat(
      "| metric | value |\n|---|---|\n",
      absl::StrFormat("| successful / failed requests | %d / %d |\n", s.completed, s.failed),
      s.output_length_mismatches > 0
          ? absl::StrFormat("| **outputs of another length than asked** | %d (not comparable) |\n",
                            s.output_length_mismatches)
          : std::string(),
      absl::StrFormat("| benchmark duration | %.2f s |\n", s.duration_s),
      absl::StrFormat("| input / output tokens | %d / %d |\n", s.total_input_tokens,
                      s.total_output_tokens),
      absl::StrFormat("| request throughput | %.2f req/s |\n", s.request_throughput),
      absl::StrFormat("| output token throughput | %.1f tok/s |\n", s.output_token_throughput),
      absl::StrFormat("| total token throughput | %.1f tok/s |\n", s.total_token_throughput));
  if (report.settings.slo.any()) {
    absl::StrAppend(&out, absl::StrFormat("| goodput | %.2f req/s (%d of %d requests within SLO) |\n",
                                          s.goodput, s.good_requests, s.completed));
  }
  absl::StrAppend(&out, "\n| ms | mean | median | p90 | p99 | std |\n|---|---|---|---|---|---|\n");
  for (const auto& [name, d] : {std::make_pair("TTFT", &s.ttft_ms), std::make_pair("TPOT", &s.tpot_ms),
                                std::make_pair("ITL", &s.itl_ms), std::make_pair("E2E", &s.e2e_ms)}) {
    absl::StrAppend(&out, absl::StrFormat("| %s | %s | %s | %s | %s | %s |\n", name,
                                          Ms(*d, d->mean), Ms(*d, d->median), Ms(*d, d->p90),
                                          Ms(*d, d->p99), Ms(*d, d->std)));
  }
  return out;
}

std::vector<std::pair<std::string, LineChart>> ServeCharts(const ServeReport& report) {
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<const RequestRecord*> ok;
  for (const RequestRecord& r : report.records) {
    if (!r.success || r.first_token_s < 0) continue;
    ok.push_back(&r);
    ttft.push_back(TtftMs(r));
    e2e.push_back(E2eMs(r));
    if (TpotMs(r) >= 0) tpot.push_back(TpotMs(r));
    for (size_t i = 1; i < r.token_times_s.size(); ++i) {
      itl.push_back((r.token_times_s[i] - r.token_times_s[i - 1]) * 1e3);
    }
  }
  const std::string where = absl::StrCat(report.settings.num_requests, " requests at ",
                                         Rate(report.settings.request_rate), " req/s, ",
                                         report.settings.protocol);
  LineChart latency;
  latency.title = absl::StrCat("TTFT and end-to-end latency CDF (", where, ")");
  latency.x_label = "latency (ms)";
  latency.y_label = "fraction of requests";
  latency.series = {{"TTFT", Cdf(ttft)}, {"E2E", Cdf(e2e)}};
  LineChart per_token;
  per_token.title = absl::StrCat("TPOT and inter-token latency CDF (", where, ")");
  per_token.x_label = "ms per token";
  per_token.y_label = "fraction";
  per_token.series = {{"TPOT (per request)", Cdf(tpot)}, {"ITL (per token)", Cdf(itl)}};
  LineChart timeline;
  timeline.title = absl::StrCat("Latency by send time (", where, ")");
  timeline.x_label = "request sent at (s since start)";
  timeline.y_label = "ms";
  std::sort(ok.begin(), ok.end(),
            [](const RequestRecord* a, const RequestRecord* b) { return a->send_s < b->send_s; });
  ChartSeries t{"TTFT", {}}, e{"E2E", {}};
  const size_t step = std::max<size_t>(1, ok.size() / 400);
  for (size_t i = 0; i < ok.size(); i += step) {
    t.points.emplace_back(ok[i]->send_s, TtftMs(*ok[i]));
    e.points.emplace_back(ok[i]->send_s, E2eMs(*ok[i]));
  }
  timeline.series = {t, e};
  return {{"-latency-cdf", latency}, {"-tpot-cdf", per_token}, {"-timeline", timeline}};
}

std::string ServeJsonText(const ServeReport& report) {
  // Indented, except one line per request: a 500-request run has ~40k ITL values, which one
  // per line would make a long and unreadable file.
  Json json = ServeReportToJson(report);
  const Json requests = json["requests"];
  json.erase("requests");
  std::string text = Dump(json, 2);
  text.resize(text.size() - 2);  // drop "\n}"
  text += ",\n  \"requests\": [";
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StrAppend(&text, i ? "," : "", "\n    ", Dump(requests[i], -1));
  }
  text += requests.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return text;
}

absl::Status WriteServeFiles(const ServeReport& report, const ServeOutputPaths& paths) {
  if (!paths.json.empty()) {
    BLOSSOM_RETURN_IF_ERROR(WriteStringToFile(paths.json, ServeJsonText(report)));
  }
  if (!paths.markdown.empty()) {
    BLOSSOM_RETURN_IF_ERROR(WriteStringToFile(paths.markdown, ServeReportToMarkdown(report)));
  }
  if (!paths.svg_prefix.empty()) {
    for (const auto& [suffix, chart] : ServeCharts(report)) {
      BLOSSOM_RETURN_IF_ERROR(
          WriteStringToFile(absl::StrCat(paths.svg_prefix, suffix, ".svg"), RenderSvg(chart)));
    }
  }
  return absl::OkStatus();
}

}  // namespace blossom
