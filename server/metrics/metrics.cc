#include "server/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace blossom::metrics {
namespace {

// std::atomic<double>::fetch_add is C++20; this is the C++17 equivalent (lock-free on x86-64).
void AtomicAdd(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

// The Prometheus data model: metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* (no colons; a leading "__" is reserved for Prometheus itself).
bool IsValidName(const std::string& s, bool allow_colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string EscapeLabelValue(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

// HELP text escapes only backslash and newline (quotes stay as they are).
std::string EscapeHelp(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

const char* TypeName(internal::MetricType t) {
  switch (t) {
    case internal::MetricType::kCounter: return "counter";
    case internal::MetricType::kGauge: return "gauge";
    case internal::MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// Sorts, deduplicates and drops NaN/infinite bounds; sets *changed if the input was not already
// strictly increasing and finite (a trailing +Inf is accepted silently: it is implicit anyway).
std::vector<double> SanitizeBounds(std::vector<double> bounds, bool* changed) {
  *changed = false;
  if (!bounds.empty() && bounds.back() == INFINITY) bounds.pop_back();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i]))) *changed = true;
  }
  if (!*changed) return bounds;
  bounds.erase(std::remove_if(bounds.begin(), bounds.end(),
                              [](double b) { return !std::isfinite(b); }),
               bounds.end());
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  return bounds;
}

}  // namespace

void Counter::Increment(double v) {
  // Counters only go up; `!(v > 0)` also rejects NaN. Adding 0 is a no-op either way.
  if (!(v > 0)) return;
  AtomicAdd(value_, v);
}

void Gauge::Add(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // First bound >= v: bounds are inclusive upper limits. NaN is no bucket's, so +Inf takes it.
  const size_t i = std::isnan(v) ? upper_bounds_.size()
                                 : std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) -
                                       upper_bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(upper_bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out = bucket_counts();
  for (size_t i = 1; i < out.size(); ++i) out[i] += out[i - 1];
  return out;
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (uint64_t c : bucket_counts()) n += c;
  return n;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1 || !std::isfinite(start) ||
      !std::isfinite(factor)) {
    spdlog::error("metrics: ExponentialBuckets({}, {}, {}) needs start > 0, factor > 1, count >= 1",
                  start, factor, count);
    return {};
  }
  std::vector<double> out;
  out.reserve(count);
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) out.push_back(b);
  return out;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  if (!(width > 0) || count < 1 || !std::isfinite(start) || !std::isfinite(width)) {
    spdlog::error("metrics: LinearBuckets({}, {}, {}) needs width > 0, count >= 1", start, width,
                  count);
    return {};
  }
  std::vector<double> out;
  out.reserve(count);
  // start + i*width rather than repeated addition, so rounding errors do not accumulate.
  for (int i = 0; i < count; ++i) out.push_back(start + i * width);
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";  // also -0
  // Counts and token totals are integers: print them plainly, not as "1e+06" (std::to_chars and
  // Go's 'g' formatting both pick the shorter exponent form).
  if (v == std::floor(v) && std::fabs(v) <= 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  return std::string(buf, end);
}

namespace internal {

std::vector<std::string> FamilyBase::FitLabelValues(const std::vector<std::string>& values) {
  if (!logged_label_mismatch_.exchange(true)) {
    spdlog::error("metrics: {} has {} label(s) ({}) but got {} value(s); padding/truncating",
                  name_, label_names_.size(), absl::StrJoin(label_names_, ","), values.size());
  }
  std::vector<std::string> fitted = values;
  fitted.resize(label_names_.size());
  return fitted;
}

std::string FormatLabels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values, const std::string& extra_name,
                         const std::string& extra_value) {
  if (names.empty() && extra_name.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    absl::StrAppend(&out, names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    if (!names.empty()) out += ',';
    absl::StrAppend(&out, extra_name, "=\"", EscapeLabelValue(extra_value), "\"");
  }
  out += '}';
  return out;
}

void RenderChild(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& label_values, const Counter& c,
                 std::string* out) {
  absl::StrAppend(out, name, FormatLabels(label_names, label_values), " ", FormatValue(c.value()),
                  "\n");
}

void RenderChild(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& label_values, const Gauge& g, std::string* out) {
  absl::StrAppend(out, name, FormatLabels(label_names, label_values), " ", FormatValue(g.value()),
                  "\n");
}

void RenderChild(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& label_values, const Histogram& h,
                 std::string* out) {
  // Read the buckets once: _count is their total, so the exposition is self-consistent even while
  // observations race with the scrape.
  const std::vector<uint64_t> cumulative = h.cumulative_counts();
  const std::vector<double>& bounds = h.upper_bounds();
  for (size_t i = 0; i < cumulative.size(); ++i) {
    const std::string le = i < bounds.size() ? FormatValue(bounds[i]) : "+Inf";
    absl::StrAppend(out, name, "_bucket", FormatLabels(label_names, label_values, "le", le), " ",
                    cumulative[i], "\n");
  }
  const std::string labels = FormatLabels(label_names, label_values);
  absl::StrAppend(out, name, "_sum", labels, " ", FormatValue(h.sum()), "\n");
  absl::StrAppend(out, name, "_count", labels, " ", cumulative.back(), "\n");
}

}  // namespace internal

void Registry::RecordError(std::string message) {
  spdlog::error("metrics: {}", message);
  errors_.push_back(std::move(message));
}

internal::FamilyBase* Registry::Add(
    internal::MetricType type, std::string name, std::string help, std::vector<double> bounds,
    std::vector<std::string> label_names,
    const std::function<std::unique_ptr<internal::FamilyBase>(
        const std::string&, std::vector<std::string>)>& make_family) {
  std::lock_guard<std::mutex> lock(mu_);
  // Why a name is not exportable; empty if it is.
  std::string problem;
  if (!IsValidName(name, /*allow_colon=*/true)) {
    problem = absl::StrCat("invalid metric name \"", name, "\"");
  }
  std::set<std::string> seen;
  for (const std::string& l : label_names) {
    if (!problem.empty()) break;
    if (!IsValidName(l, /*allow_colon=*/false)) {
      problem = absl::StrCat("invalid label name \"", l, "\" in ", name);
    } else if (l.rfind("__", 0) == 0) {
      problem = absl::StrCat("reserved label name \"", l, "\" in ", name);
    } else if (type == internal::MetricType::kHistogram && l == "le") {
      problem = absl::StrCat("label name \"le\" is reserved in histogram ", name);
    } else if (!seen.insert(l).second) {
      problem = absl::StrCat("duplicate label name \"", l, "\" in ", name);
    }
  }
  if (type == internal::MetricType::kHistogram) {
    bool changed = false;
    bounds = SanitizeBounds(std::move(bounds), &changed);
    if (changed) {
      RecordError(absl::StrCat("histogram ", name,
                               " bucket bounds were not strictly increasing and finite; using ",
                               absl::StrJoin(bounds, ",")));
    }
  }
  if (problem.empty()) {
    auto it = exported_.find(name);
    if (it == exported_.end()) {
      Entry entry{type, help, bounds, make_family(name, label_names)};
      internal::FamilyBase* family = entry.family.get();
      exported_.emplace(name, std::move(entry));
      return family;
    }
    const Entry& e = it->second;
    if (e.type == type && e.help == help && e.bounds == bounds &&
        e.family->label_names() == label_names) {
      return e.family.get();  // the same definition again: share it
    }
    problem = absl::StrCat("metric ", name, " is already registered with a different definition");
  }
  RecordError(absl::StrCat(problem, "; the family works but is not exported"));
  unexported_.push_back(make_family(name, std::move(label_names)));
  return unexported_.back().get();
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> label_names) {
  auto make = [](const std::string& n, std::vector<std::string> labels) {
    return std::make_unique<Family<Counter>>(n, std::move(labels),
                                             [] { return std::make_unique<Counter>(); });
  };
  return *static_cast<Family<Counter>*>(Add(internal::MetricType::kCounter, std::move(name),
                                            std::move(help), {}, std::move(label_names), make));
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> label_names) {
  auto make = [](const std::string& n, std::vector<std::string> labels) {
    return std::make_unique<Family<Gauge>>(n, std::move(labels),
                                           [] { return std::make_unique<Gauge>(); });
  };
  return *static_cast<Family<Gauge>*>(Add(internal::MetricType::kGauge, std::move(name),
                                          std::move(help), {}, std::move(label_names), make));
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<double> bucket_upper_bounds,
                                          std::vector<std::string> label_names) {
  // Children get the sanitised bounds (Add sanitises again to validate, compare and log).
  auto sanitized = std::make_shared<std::vector<double>>();
  auto make = [sanitized](const std::string& n, std::vector<std::string> labels) {
    return std::make_unique<Family<Histogram>>(
        n, std::move(labels), [sanitized] { return std::make_unique<Histogram>(*sanitized); });
  };
  bool changed = false;
  *sanitized = SanitizeBounds(bucket_upper_bounds, &changed);
  return *static_cast<Family<Histogram>*>(Add(internal::MetricType::kHistogram, std::move(name),
                                              std::move(help), std::move(bucket_upper_bounds),
                                              std::move(label_names), make));
}

std::vector<std::string> Registry::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

void Registry::AddCollectHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hooks_.push_back(std::move(hook));
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> collect_lock(collect_mu_);
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hooks = hooks_;
  }
  // Without mu_ held: hooks update families (family locks only) and may even register new ones.
  for (const auto& hook : hooks) hook();

  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, entry] : exported_) {
    // client_golang omits an empty HELP too.
    if (!entry.help.empty()) {
      absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(entry.help), "\n");
    }
    absl::StrAppend(&out, "# TYPE ", name, " ", TypeName(entry.type), "\n");
    entry.family->RenderSamples(&out);
  }
  return out;
}

}  // namespace blossom::metrics
