#include "benchmarks/cpu_hardware_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm.h"

namespace blossom {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CpuHardwareProbe::CpuHardwareProbe(const CpuProbeOptions& options)
    : options_(options), pool_(std::make_unique<ThreadPool>(options.threads)) {}

CpuHardwareProbe::~CpuHardwareProbe() = default;

std::string CpuHardwareProbe::Describe() const {
  return absl::StrCat("cpu, ", pool_->num_threads(), " threads");
}

absl::StatusOr<double> CpuHardwareProbe::MeasureCopyBandwidth() {
  if (options_.copy_bytes <= 0 || options_.repetitions <= 0) {
    return absl::InvalidArgumentError("copy_bytes and repetitions must be positive");
  }
  const int64_t n = options_.copy_bytes;
  // Touch both buffers first so page faults are not timed.
  std::vector<char> src(n, 1), dst(n, 0);
  const int64_t chunk = std::max<int64_t>(1 << 20, n / (4 * pool_->num_threads()));
  double best = 0.0;
  for (int r = 0; r < options_.repetitions + 1; ++r) {  // +1: the first run warms up
    const double start = Now();
    pool_->ParallelFor(n, chunk, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, static_cast<size_t>(e - b));
    });
    const double seconds = Now() - start;
    if (r > 0 && seconds > 0.0) best = std::max(best, 2.0 * static_cast<double>(n) / seconds);
  }
  if (dst[n / 2] != 1) return absl::InternalError("memcpy probe: copy did not happen");
  return best;
}

absl::StatusOr<double> CpuHardwareProbe::MeasureGemmFlops(DType weight_dtype) {
  if (!IsFloat(weight_dtype)) {
    return absl::InvalidArgumentError("the GEMM probe needs a float weight dtype");
  }
  const int64_t m = options_.gemm_m, n = options_.gemm_n, k = options_.gemm_k;
  if (m <= 0 || n <= 0 || k <= 0 || options_.repetitions <= 0) {
    return absl::InvalidArgumentError("GEMM probe shape and repetitions must be positive");
  }
  std::vector<float> x(m * k), out(m * n), w32(n * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = static_cast<float>((i % 7) - 3) * 0.01f;
  for (int64_t i = 0; i < n * k; ++i) w32[i] = static_cast<float>((i % 5) - 2) * 0.01f;
  std::vector<char> w(n * k * DTypeSize(weight_dtype));
  ConvertFromF32(w32.data(), w.data(), weight_dtype, static_cast<size_t>(n * k));
  GemmArgs args;
  args.x = x.data();
  args.w = w.data();
  args.w_dtype = weight_dtype;
  args.out = out.data();
  args.m = m;
  args.n = n;
  args.k = k;
  double best = 0.0;
  for (int r = 0; r < options_.repetitions + 1; ++r) {
    const double start = Now();
    GemmNT(args, pool_.get());
    const double seconds = Now() - start;
    if (r > 0 && seconds > 0.0) best = std::max(best, 2.0 * m * n * k / seconds);
  }
  return best;
}

}  // namespace blossom
