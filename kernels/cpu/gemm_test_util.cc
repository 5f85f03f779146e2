#include "kernels/cpu/gemm_test_util.h"

#include <cstring>

#include "gtest/gtest.h"

namespace blossom {

std::vector<float> RandomNormal(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void ExpectBatchInvariant(GemmFn gemm, GemmArgs args, const std::vector<float>& x, int64_t max_m,
                          const std::string& label) {
  const int64_t n = args.n, k = args.k;
  std::vector<GemmIsa> isas = {GemmIsa::kPortable};
  if (GemmIsaSupported(GemmIsa::kAvx2)) isas.push_back(GemmIsa::kAvx2);
  if (GemmIsaSupported(GemmIsa::kAvx512)) isas.push_back(GemmIsa::kAvx512);
  ThreadPool pool4(4), pool1(1);
  std::vector<float> solo(max_m * n);
  for (int64_t row = 0; row < max_m; ++row) {
    args.x = x.data() + row * k;
    args.out = solo.data() + row * n;
    args.m = 1;
    gemm(args, &pool1, GemmIsa::kPortable);
  }
  for (GemmIsa isa : isas)
    for (ThreadPool* pool : {&pool1, &pool4})
      for (int64_t m = 1; m <= max_m; ++m) {
        std::vector<float> batched(m * n);
        args.x = x.data();
        args.out = batched.data();
        args.m = m;
        gemm(args, pool, isa);
        ASSERT_EQ(0, std::memcmp(solo.data(), batched.data(), m * n * sizeof(float)))
            << label << " isa " << GemmIsaName(isa) << " threads " << pool->num_threads()
            << " m " << m;
      }
}

}  // namespace blossom
