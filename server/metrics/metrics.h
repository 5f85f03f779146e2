// Prometheus metrics: counters, gauges and histograms in labelled families, rendered in the
// text exposition format 0.0.4 (what GET /metrics serves).
//
// Usage: register every family once at startup, keep the references, update from any thread:
//
//   Registry registry;
//   auto& tokens = registry.AddCounter("blossom_generation_tokens_total", "Tokens generated.");
//   auto& ttft = registry.AddHistogram("blossom_time_to_first_token_seconds", "TTFT.",
//                                      ExponentialBuckets(0.001, 2, 16));
//   auto& finished = registry.AddCounter("blossom_request_success_total", "Finished requests.",
//                                        {"finished_reason"});
//   tokens.Get().Increment(5);
//   finished.Get({"length"}).Increment();
//   std::string body = registry.Render();
//
// Programming errors never abort (a metrics mistake must not take the server down) and never
// corrupt the exposition (one bad line makes Prometheus reject the whole scrape):
// - An invalid metric or label name, a reserved label name (`__*`, `le` on a histogram), a
//   duplicate label name, or a second registration of a name with a different type, help, label
//   names or buckets: the error is logged once with spdlog and recorded in `Registry::errors()`,
//   and a working but *unexported* family is returned (never rendered).
// - Registering the same name again with an identical definition returns the existing family.
// - `Family::Get` with the wrong number of label values: logged once per family, the values are
//   padded with "" or truncated to the family's label count, and that child is returned.
// - Histogram bounds that are not strictly increasing, or hold NaN: logged and recorded, the bounds
//   are sorted and deduplicated with NaN and infinities dropped (`+Inf` is always implicit).
#ifndef BLOSSOM_SERVER_METRICS_METRICS_H_
#define BLOSSOM_SERVER_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

namespace blossom::metrics {

// A monotonically increasing value. Thread-safe and lock-free: Increment is a compare-and-swap
// loop on one atomic double, so concurrent increments are never lost (integral totals are exact up
// to 2^53). Invariant: value() never decreases; negative or NaN increments are ignored.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Increment(double v = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down. Thread-safe and lock-free (Set is a store, Add a CAS loop).
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets with fixed upper bounds (inclusive: an observation equal to a
// bound goes into that bucket, as Prometheus' `le` says) plus the implicit +Inf bucket, and sums
// them. Thread-safe and lock-free: one atomic counter per bucket and a CAS loop for the sum. A
// concurrent reader may see an observation in its bucket before it is in sum(); count() is derived
// from the buckets so `_count` always equals the `+Inf` bucket. NaN lands in +Inf and makes the
// sum NaN (as in client_golang).
class Histogram {
 public:
  // `upper_bounds` must already be sorted, unique and finite (Registry sanitises them).
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);

  // Finite upper bounds, ascending (the +Inf bucket is not listed).
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Per-bucket counts, not cumulative; upper_bounds().size() + 1 of them, the last for
  // (largest bound, +Inf].
  std::vector<uint64_t> bucket_counts() const;
  // Cumulative counts as exposed in `_bucket{le=...}`; the last equals count().
  std::vector<uint64_t> cumulative_counts() const;
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> upper_bounds_;
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // upper_bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

// Bounds start, start*factor, ..., count of them. Needs start > 0, factor > 1, count >= 1;
// otherwise logs an error and returns {}.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bounds start, start+width, ..., count of them. Needs width > 0, count >= 1; otherwise {}.
std::vector<double> LinearBuckets(double start, double width, int count);

// Formats a sample value as Prometheus expects: "+Inf", "-Inf", "NaN", integral values up to 2^53
// without exponent or fraction ("1000000"), anything else as the shortest string that parses back
// to the same double ("0.1", "1e-05", "2.5e+20"). Locale-independent.
std::string FormatValue(double v);

namespace internal {

enum class MetricType { kCounter, kGauge, kHistogram };

// The type-independent half of a family, so the Registry can hold and render any of them.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  // Appends every child's sample lines (not HELP/TYPE) to `out`, children in label-value order.
  virtual void RenderSamples(std::string* out) const = 0;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

 protected:
  FamilyBase(std::string name, std::vector<std::string> label_names)
      : name_(std::move(name)), label_names_(std::move(label_names)) {}
  // Pads or truncates `values` to the label count, logging the first mismatch only.
  std::vector<std::string> FitLabelValues(const std::vector<std::string>& values);

  const std::string name_;
  const std::vector<std::string> label_names_;

 private:
  std::atomic<bool> logged_label_mismatch_{false};
};

// `{a="x",b="y"}` with values escaped, plus `extra` (e.g. `le="0.5"`) last; "" if no labels at all.
std::string FormatLabels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values, const std::string& extra_name = "",
                         const std::string& extra_value = "");
void RenderChild(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& label_values, const Counter& c, std::string* out);
void RenderChild(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& label_values, const Gauge& g, std::string* out);
void RenderChild(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& label_values, const Histogram& h,
                 std::string* out);

}  // namespace internal

// One metric name with fixed label names; one child metric per distinct label-value tuple.
// Thread-safe. Children are created on first use and live as long as the family (the Registry),
// so references returned by Get are stable: hot paths should Get once and keep the reference
// (Get takes a reader lock, and a writer lock only to create a child).
template <typename T>
class Family : public internal::FamilyBase {
 public:
  Family(std::string name, std::vector<std::string> label_names,
         std::function<std::unique_ptr<T>()> make_child)
      : FamilyBase(std::move(name), std::move(label_names)), make_child_(std::move(make_child)) {}
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // The child for these label values (in label-name order). Wrong count: see the file comment.
  T& Get(const std::vector<std::string>& label_values = {}) {
    if (label_values.size() != label_names_.size()) return GetExact(FitLabelValues(label_values));
    return GetExact(label_values);
  }

  void RenderSamples(std::string* out) const override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (const auto& [values, child] : children_) {
      internal::RenderChild(name_, label_names_, values, *child, out);
    }
  }

 private:
  T& GetExact(const std::vector<std::string>& values) {
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      auto it = children_.find(values);
      if (it != children_.end()) return *it->second;
    }
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto& slot = children_[values];
    if (slot == nullptr) slot = make_child_();
    return *slot;
  }

  const std::function<std::unique_ptr<T>()> make_child_;
  // Standard (pthread) locks rather than absl::Mutex in this library: ThreadSanitizer sees
  // pthread locks through its interceptors, but not the system Abseil's Mutex (not instrumented),
  // so with absl::Mutex every access it guards is reported as a race under --config=tsan.
  mutable std::shared_mutex mu_;
  // Guarded by mu_. std::map: rendering order is deterministic (sorted by label values).
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

// Owns metric families and renders them. Thread-safe: registration, Get, updates and Render may
// run concurrently. Families are rendered sorted by name. Nothing is ever unregistered, so every
// returned reference is valid for the Registry's lifetime.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Counter names are exported exactly as given (no `_total` is appended; name them `..._total`).
  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(std::string name, std::string help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<double> bucket_upper_bounds,
                                  std::vector<std::string> label_names = {});

  // Runs every collect hook, then renders every exported family (HELP omitted when empty).
  std::string Render() const;

  // Hooks run at the start of each Render, in the order added, one Render at a time, e.g. to
  // refresh gauges from engine statistics. They may use and register families of this Registry
  // but must not call Render (deadlock).
  void AddCollectHook(std::function<void()> hook);

  // Every registration error so far (see the file comment), oldest first.
  std::vector<std::string> errors() const;

 private:
  struct Entry {
    internal::MetricType type;
    std::string help;
    std::vector<double> bounds;  // histograms only
    std::unique_ptr<internal::FamilyBase> family;
  };
  // Validates and registers; returns the family to hand out (maybe an unexported one).
  internal::FamilyBase* Add(internal::MetricType type, std::string name, std::string help,
                            std::vector<double> bounds, std::vector<std::string> label_names,
                            const std::function<std::unique_ptr<internal::FamilyBase>(
                                const std::string&, std::vector<std::string>)>& make_family);
  void RecordError(std::string message);  // requires mu_

  // std::mutex, not absl::Mutex: see Family::mu_.
  mutable std::mutex mu_;
  // Guarded by mu_.
  std::map<std::string, Entry> exported_;
  // Families returned for invalid registrations: usable, never rendered.
  std::vector<std::unique_ptr<internal::FamilyBase>> unexported_;
  std::vector<std::string> errors_;
  std::vector<std::function<void()>> hooks_;
  // Serialises hook runs, so hooks need not be reentrant; acquired before mu_, and never held
  // together with mu_ while a hook runs (hooks may call Get/Add*, which take mu_ or family locks).
  mutable std::mutex collect_mu_;
};

}  // namespace blossom::metrics

#endif  // BLOSSOM_SERVER_METRICS_METRICS_H_
