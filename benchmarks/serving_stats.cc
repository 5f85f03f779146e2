#include "benchmarks/serving_stats.h"

#include <algorithm>
#include <cmath>

namespace blossom {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

Distribution Summarize(const std::vector<double>& values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (double v : values) sq += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(sq / static_cast<double>(values.size()));
  d.median = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  d.min = *std::min_element(values.begin(), values.end());
  d.max = *std::max_element(values.begin(), values.end());
  return d;
}

double TtftMs(const RequestRecord& r) { return (r.first_token_s - r.send_s) * 1e3; }
// To the last token, as vLLM's benchmark ends a request's latency (its most recent token-carrying
// chunk): the final usage message, [DONE] and the stream's close that follow are not the model's.
double E2eMs(const RequestRecord& r) {
  const double end = r.token_times_s.empty() ? r.end_s : r.token_times_s.back();
  return (end - r.send_s) * 1e3;
}
double TpotMs(const RequestRecord& r) {
  if (r.output_tokens < 2) return -1;
  return (E2eMs(r) - TtftMs(r)) / static_cast<double>(r.output_tokens - 1);
}

ServingSummary SummarizeRequests(const std::vector<RequestRecord>& records, double duration_s,
                                 const Slo& slo) {
  ServingSummary s;
  s.requests = static_cast<int64_t>(records.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    // A stream that ended without any token cannot give a TTFT; count it as failed.
    if (!r.success || r.first_token_s < 0) {
      ++s.failed;
      std::string reason = r.success ? "no token received" : r.error;
      reason = reason.substr(0, reason.find(':'));
      if (reason.empty()) reason = "unknown";
      ++s.failures[reason];
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    if (r.expected_output_tokens > 0 && r.output_tokens != r.expected_output_tokens) {
      ++s.output_length_mismatches;
    }
    const double t = TtftMs(r), e = E2eMs(r), p = TpotMs(r);
    ttft.push_back(t);
    e2e.push_back(e);
    if (p >= 0) tpot.push_back(p);
    for (size_t i = 1; i < r.token_times_s.size(); ++i) {
      itl.push_back((r.token_times_s[i] - r.token_times_s[i - 1]) * 1e3);
    }
    const bool good = (slo.ttft_ms <= 0 || t <= slo.ttft_ms) &&
                      (slo.tpot_ms <= 0 || std::max(p, 0.0) <= slo.tpot_ms) &&
                      (slo.e2e_ms <= 0 || e <= slo.e2e_ms);
    if (good) ++s.good_requests;
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.output_token_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    s.goodput = static_cast<double>(s.good_requests) / duration_s;
  }
  s.ttft_ms = Summarize(ttft);
  s.tpot_ms = Summarize(tpot);
  s.itl_ms = Summarize(itl);
  s.e2e_ms = Summarize(e2e);
  return s;
}

}  // namespace blossom
