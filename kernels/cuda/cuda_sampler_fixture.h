// The GPU sampler tests' shared fixture (cuda_sampling_test, cuda_sampling_logprobs_test): a
// CudaSampler on the default stream, and logits rows uploaded to the device. Without a visible
// GPU every test reports SKIPPED with the reason.
#ifndef BLOSSOM_KERNELS_CUDA_CUDA_SAMPLER_FIXTURE_H_
#define BLOSSOM_KERNELS_CUDA_CUDA_SAMPLER_FIXTURE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_sampling.h"
#include "kernels/cuda/device.h"

namespace blossom {
namespace cuda {

inline constexpr int64_t kBloomVocab = 250880;

class CudaSamplerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const DeviceQuery q = QueryDevices();
    if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
    auto s = CudaSampler::Create(nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    sampler_ = std::move(*s);
  }
  void TearDown() override {
    if (logits_ != nullptr) cudaFree(logits_);
  }

  // Copies `host` to logits_ (grown when too small); false (with a failure) if CUDA refused.
  bool Upload(const std::vector<float>& host) {
    const size_t bytes = host.size() * sizeof(float);
    if (bytes > logits_bytes_) {
      if (logits_ != nullptr) cudaFree(logits_);
      logits_bytes_ = 0;
      const cudaError_t err = cudaMalloc(&logits_, bytes);
      EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
      if (err != cudaSuccess) {
        logits_ = nullptr;
        return false;
      }
      logits_bytes_ = bytes;
    }
    const cudaError_t err = cudaMemcpy(logits_, host.data(), bytes, cudaMemcpyHostToDevice);
    EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
    return err == cudaSuccess;
  }

  std::unique_ptr<CudaSampler> sampler_;
  float* logits_ = nullptr;
  size_t logits_bytes_ = 0;
};

// n logits drawn from normal(0, scale), reproducibly from `seed`.
inline std::vector<float> RandomLogits(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace cuda
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_CUDA_SAMPLER_FIXTURE_H_
