// How many CPUs this process may really use: the cores it is allowed to run on (its affinity
// mask: taskset, cpusets, Kubernetes' static CPU manager), capped by a CFS quota (a container's
// CPU limit, cgroup v2 cpu.max or v1 cpu.cfs_quota_us). std::thread::hardware_concurrency()
// counts every core of the machine: a pod limited to 4 CPUs on a 64-core node would start 64
// compute threads that spin and straggle behind each other.
#ifndef BLOSSOM_KERNELS_CPU_CPU_BUDGET_H_
#define BLOSSOM_KERNELS_CPU_CPU_BUDGET_H_

#include <optional>
#include <string_view>

namespace blossom {

// At least 1. Read once per call (cheap: a syscall and two small files).
int UsableCpus();

// The CPUs a CFS quota allows, rounded up: "400000 100000" -> 4, "150000 100000" -> 2;
// nullopt for "max ..." (no limit) or text that is not a quota.
std::optional<int> CpusFromCgroupV2CpuMax(std::string_view cpu_max);
// cgroup v1: cpu.cfs_quota_us ("-1": no limit) and cpu.cfs_period_us.
std::optional<int> CpusFromCgroupV1Quota(std::string_view quota_us, std::string_view period_us);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_CPU_BUDGET_H_
