#include "server/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

namespace blossom::metrics {
namespace {

// Field 22 of /proc/self/stat: start time in clock ticks since boot. The command name (field 2)
// may contain spaces, so fields are counted after its closing parenthesis.
double StartTimeSeconds() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0.0;
  std::istringstream rest(text.substr(paren + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) start_ticks = std::stoull(field);
  }
  std::ifstream proc_stat("/proc/stat");
  std::string line;
  double boot_time = 0.0;
  while (std::getline(proc_stat, line)) {
    if (line.rfind("btime ", 0) == 0) boot_time = std::stod(line.substr(6));
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  if (boot_time == 0.0 || ticks <= 0) return 0.0;
  return boot_time + static_cast<double>(start_ticks) / static_cast<double>(ticks);
}

int64_t CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int64_t n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir itself holds
}

}  // namespace

ProcessSample SampleProcess() {
  ProcessSample s;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    s.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                    static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  }
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    const long page = sysconf(_SC_PAGESIZE);
    s.virtual_bytes = size_pages * page;
    s.resident_bytes = resident_pages * page;
  }
  s.open_fds = CountOpenFds();
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) s.max_fds = static_cast<int64_t>(limit.rlim_cur);
  s.start_time_seconds = StartTimeSeconds();
  return s;
}

void RegisterProcessMetrics(Registry* registry) {
  Family<Counter>& cpu = registry->AddCounter("process_cpu_seconds_total",
                                              "Total user and system CPU time spent in seconds.");
  Family<Gauge>& resident = registry->AddGauge("process_resident_memory_bytes",
                                               "Resident memory size in bytes.");
  Family<Gauge>& virt =
      registry->AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
  Family<Gauge>& open_fds =
      registry->AddGauge("process_open_fds", "Number of open file descriptors.");
  Family<Gauge>& max_fds =
      registry->AddGauge("process_max_fds", "Maximum number of open file descriptors.");
  Family<Gauge>& start = registry->AddGauge(
      "process_start_time_seconds", "Start time of the process since unix epoch in seconds.");
  // The counter is advanced by the CPU time since the previous scrape (hooks run one at a time).
  auto last_cpu = std::make_shared<double>(0.0);
  auto refresh = [&cpu, &resident, &virt, &open_fds, &max_fds, &start, last_cpu] {
    const ProcessSample s = SampleProcess();
    if (s.cpu_seconds > *last_cpu) {
      cpu.Get().Increment(s.cpu_seconds - *last_cpu);
      *last_cpu = s.cpu_seconds;
    }
    resident.Get().Set(static_cast<double>(s.resident_bytes));
    virt.Get().Set(static_cast<double>(s.virtual_bytes));
    open_fds.Get().Set(static_cast<double>(s.open_fds));
    max_fds.Get().Set(static_cast<double>(s.max_fds));
    start.Get().Set(s.start_time_seconds);
  };
  refresh();
  registry->AddCollectHook(refresh);
}

void RegisterBuildInfo(Registry* registry, const std::string& name, const std::string& help,
                       const std::vector<std::pair<std::string, std::string>>& labels) {
  std::vector<std::string> names, values;
  for (const auto& [label, value] : labels) {
    names.push_back(label);
    values.push_back(value);
  }
  registry->AddGauge(name, help, names).Get(values).Set(1.0);
}

}  // namespace blossom::metrics
