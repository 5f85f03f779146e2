// Request arrival schedules for the serving benchmark, as vLLM's benchmark_serving draws them:
// inter-arrival gaps from a gamma distribution with shape = burstiness and mean = 1 / rate
// (shape 1 is a Poisson process; shape < 1 is burstier, > 1 more regular). An infinite rate
// sends every request at time 0.
//
// Pure functions of their arguments (the generator is seeded here), so the same seed gives the
// same schedule on every machine that has the same libstdc++; thread-safe.
#ifndef BLOSSOM_BENCHMARKS_ARRIVALS_H_
#define BLOSSOM_BENCHMARKS_ARRIVALS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace blossom {

enum class ArrivalProcess { kPoisson, kGamma };

struct ArrivalOptions {
  // Requests per second; +infinity = all at once.
  double request_rate = 1.0;
  ArrivalProcess process = ArrivalProcess::kPoisson;
  // Gamma shape (only for kGamma; kPoisson always uses 1). Must be > 0.
  double burstiness = 1.0;
  uint64_t seed = 0;
};

// Parses "poisson" or "gamma".
absl::StatusOr<ArrivalProcess> ParseArrivalProcess(const std::string& text);
const char* ArrivalProcessName(ArrivalProcess process);

// Send offsets in seconds from the start for `count` requests: non-decreasing, the first at 0
// and each later one a gap after the previous (vLLM's order), or all 0 for an infinite rate.
absl::StatusOr<std::vector<double>> ArrivalSchedule(const ArrivalOptions& options, int count);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_ARRIVALS_H_
