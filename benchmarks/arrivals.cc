#include "benchmarks/arrivals.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace blossom {

absl::StatusOr<ArrivalProcess> ParseArrivalProcess(const std::string& text) {
  if (text == "poisson") return ArrivalProcess::kPoisson;
  if (text == "gamma") return ArrivalProcess::kGamma;
  return absl::InvalidArgumentError(
      absl::StrCat("--arrival '", text, "': expected poisson or gamma"));
}

const char* ArrivalProcessName(ArrivalProcess process) {
  return process == ArrivalProcess::kPoisson ? "poisson" : "gamma";
}

absl::StatusOr<std::vector<double>> ArrivalSchedule(const ArrivalOptions& options, int count) {
  if (count < 0) return absl::InvalidArgumentError("negative request count");
  if (!(options.request_rate > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-rate ", options.request_rate, ": must be > 0 (or inf)"));
  }
  const double shape = options.process == ArrivalProcess::kPoisson ? 1.0 : options.burstiness;
  if (!(shape > 0) || !std::isfinite(shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--burstiness ", options.burstiness, ": must be a finite number > 0"));
  }
  std::vector<double> times(static_cast<size_t>(count), 0.0);
  if (std::isinf(options.request_rate)) return times;
  // Gamma(shape k, scale θ) has mean kθ; θ = 1 / (rate k) keeps the mean gap at 1 / rate and
  // makes the gap's coefficient of variation 1 / sqrt(k) (vLLM's burstiness).
  std::mt19937_64 rng(options.seed);
  std::gamma_distribution<double> gap(shape, 1.0 / (options.request_rate * shape));
  // As vLLM: the first request goes at once, each later one a gap after the previous.
  for (size_t i = 1; i < times.size(); ++i) times[i] = times[i - 1] + gap(rng);
  return times;
}

}  // namespace blossom
