// Helpers of the CPU backend's tests: random data and tensors over vectors.
#ifndef BLOSSOM_KERNELS_CPU_CPU_BACKEND_TEST_UTIL_H_
#define BLOSSOM_KERNELS_CPU_CPU_BACKEND_TEST_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "kernels/tensor.h"

namespace blossom::cpu_test {

// n normal values (mean 0, standard deviation `scale`); the same seed gives the same values.
inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Tensors viewing a vector's storage (which must outlive them).
inline Tensor F32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}
inline Tensor I32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kI32, shape);
}

}  // namespace blossom::cpu_test

#endif  // BLOSSOM_KERNELS_CPU_CPU_BACKEND_TEST_UTIL_H_
