// The standard Prometheus process metrics (client_golang's names, which dashboards and alerts
// expect): process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds and process_start_time_seconds, read from /proc and
// getrusage at every scrape (a Registry collect hook). Plus a build-info gauge (value 1, the
// version as a label), the convention for exposing what binary is running.
//
// Linux only: on a system without /proc the /proc-based gauges stay 0.
#ifndef BLOSSOM_SERVER_METRICS_PROCESS_METRICS_H_
#define BLOSSOM_SERVER_METRICS_PROCESS_METRICS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/metrics/metrics.h"

namespace blossom::metrics {

struct ProcessSample {
  double cpu_seconds = 0.0;  // user + system
  int64_t resident_bytes = 0;
  int64_t virtual_bytes = 0;
  int64_t open_fds = 0;
  int64_t max_fds = 0;
  double start_time_seconds = 0.0;  // since the Unix epoch
};

// Reads this process's current values.
ProcessSample SampleProcess();

// Registers the process_* families on `registry` and a hook that refreshes them on every Render.
void RegisterProcessMetrics(Registry* registry);

// Registers `<name>{version="...", <label>="<value>"...} 1`.
void RegisterBuildInfo(Registry* registry, const std::string& name, const std::string& help,
                       const std::vector<std::pair<std::string, std::string>>& labels);

}  // namespace blossom::metrics

#endif  // BLOSSOM_SERVER_METRICS_PROCESS_METRICS_H_
