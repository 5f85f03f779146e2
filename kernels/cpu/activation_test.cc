#include "kernels/cpu/activation.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace blossom {
namespace {

std::vector<float> Inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-4f, -1e-4f, 0.5f, -0.5f, 3.0f, -3.0f,
                          9.0f, -9.0f, 20.0f, -20.0f, 1e4f, -1e4f, 3e38f, -3e38f};
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int i = 0; i < 1003; ++i) v.push_back(dist(rng));
  return v;
}

// Against HF's tanh formula in double: a few ulp of x * (1 + tanh(u)) / 2, i.e. relative to |x|.
TEST(ActivationTest, PortableMatchesTanhFormula) {
  std::vector<float> v = Inputs(), out = v;
  BloomGeluInPlace(out.data(), static_cast<int64_t>(out.size()), false);
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    const double ref = x * 0.5 * (1.0 + std::tanh(0.79788456 * x * (1 + 0.044715 * x * x)));
    ASSERT_NEAR(out[i], ref, 4e-7 * std::fabs(x) + 1e-37) << "x " << x;
  }
}

TEST(ActivationTest, Avx2IsBitIdenticalToPortable) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU lacks AVX2/FMA";
  std::vector<float> v = Inputs(), a = v, b = v;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, static_cast<int64_t>(v.size())}) {
    a = v;
    b = v;
    BloomGeluInPlace(a.data(), n, false);
    BloomGeluInPlace(b.data(), n, true);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), v.size() * sizeof(float))) << "n " << n;
  }
}

}  // namespace
}  // namespace blossom
