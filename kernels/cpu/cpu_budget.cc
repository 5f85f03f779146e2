#include "kernels/cpu/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace blossom {
namespace {

std::optional<int64_t> ParsePositive(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value <= 0) return std::nullopt;
  return value;
}

std::optional<int> QuotaCpus(int64_t quota, int64_t period) {
  return static_cast<int>(std::max<int64_t>(1, (quota + period - 1) / period));
}

std::string ReadSmallFile(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str().substr(0, 256);
}

}  // namespace

std::optional<int> CpusFromCgroupV2CpuMax(std::string_view cpu_max) {
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::optional<int64_t> quota = ParsePositive(cpu_max.substr(0, space));  // "max": none
  const std::optional<int64_t> period = ParsePositive(cpu_max.substr(space + 1));
  if (!quota || !period) return std::nullopt;
  return QuotaCpus(*quota, *period);
}

std::optional<int> CpusFromCgroupV1Quota(std::string_view quota_us, std::string_view period_us) {
  const std::optional<int64_t> quota = ParsePositive(quota_us);  // "-1": none
  const std::optional<int64_t> period = ParsePositive(period_us);
  if (!quota || !period) return std::nullopt;
  return QuotaCpus(*quota, *period);
}

int UsableCpus() {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    const int allowed = CPU_COUNT(&mask);
    if (allowed > 0) cpus = cpus > 0 ? std::min(cpus, allowed) : allowed;
  }
  // The process's own cgroup is the root of its namespace in a container; a host process in a
  // nested cgroup reads the root's (no quota), which errs towards more threads, as before.
  std::optional<int> quota = CpusFromCgroupV2CpuMax(ReadSmallFile("/sys/fs/cgroup/cpu.max"));
  if (!quota) {
    quota = CpusFromCgroupV1Quota(ReadSmallFile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                                  ReadSmallFile("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
  }
  if (quota && (cpus <= 0 || *quota < cpus)) cpus = *quota;
  return std::max(1, cpus);
}

}  // namespace blossom
