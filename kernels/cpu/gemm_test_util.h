// Test helpers shared by gemm_test and quant_gemm_test: random operands, shapes, and the
// batch-invariance check.
#ifndef BLOSSOM_KERNELS_CPU_GEMM_TEST_UTIL_H_
#define BLOSSOM_KERNELS_CPU_GEMM_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace blossom {

// n samples of a unit normal.
std::vector<float> RandomNormal(size_t n, std::mt19937& rng);

struct GemmShape {
  int64_t m, n, k;
};

using GemmFn = void (*)(const GemmArgs&, ThreadPool*, GemmIsa);

// Runs `gemm` with `args` (w, dtypes, bias, n, k, activation set; x, out and m are filled in) on
// the first m rows of `x` for m = 1..max_m, with 1 and 4 threads, on every path this CPU supports,
// and adds a gtest failure unless every row is bit-identical to that row computed alone,
// single-threaded, on the portable path.
void ExpectBatchInvariant(GemmFn gemm, GemmArgs args, const std::vector<float>& x, int64_t max_m,
                          const std::string& label);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_GEMM_TEST_UTIL_H_
