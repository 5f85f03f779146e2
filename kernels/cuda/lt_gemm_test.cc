// LtGemm's bucketed plans against a CPU fp64 reference: out = x w^T for row counts that share a
// plan (3 and 4; 129 and 256; 300 and 512), straddle bucket edges (256, 257) and repeat after a
// larger call in the same bucket, each with candidate timing off and on. Timing may only change
// which algorithm runs, never the product; so both must meet the reference.
// Tolerance, fp32 (CUBLAS_COMPUTE_32F, no TF32): |gpu - ref| <= 1e-5 * (|ref| + rms(ref)),
// the rms term absorbing cancellation near zero (as in cuda_backend_test); NaN fails.
// Without a visible GPU every test reports SKIPPED with the reason.
#include "kernels/cuda/lt_gemm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm_plan_policy.h"

namespace blossom {
namespace {

constexpr int64_t kN = 96, kK = 160, kMaxRows = 512;

class LtGemmTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const cuda::DeviceQuery q = cuda::QueryDevices();
    if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&workspace_, kWorkspace), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&x_, kMaxRows * kK * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&w_, kN * kK * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out_, kMaxRows * kN * sizeof(float)), cudaSuccess);
    absl::StatusOr<std::unique_ptr<LtGemm>> gemm = LtGemm::Create(workspace_, kWorkspace, stream_);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    gemm_ = std::move(*gemm);
    gemm_->set_time_candidates(GetParam());
    std::mt19937 gen(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    x_host_.resize(kMaxRows * kK);
    w_host_.resize(kN * kK);
    for (float& v : x_host_) v = normal(gen);
    for (float& v : w_host_) v = normal(gen);
    ASSERT_EQ(cudaMemcpy(x_, x_host_.data(), x_host_.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(w_, w_host_.data(), w_host_.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  void TearDown() override {
    gemm_.reset();
    for (void* p : {static_cast<void*>(x_), static_cast<void*>(w_), static_cast<void*>(out_),
                    workspace_})
      if (p != nullptr) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Runs m rows through LtGemm and checks them against the reference.
  void CheckRows(int64_t m) {
    SCOPED_TRACE(testing::Message() << "M=" << m << " (bucket " << GemmRowBucket(m)
                                    << "), timing " << (GetParam() ? "on" : "off"));
    ASSERT_EQ(cudaMemset(out_, 0xff, kMaxRows * kN * sizeof(float)), cudaSuccess);  // NaNs
    bool done = false;
    absl::Status s = gemm_->Matmul(Tensor(x_, DType::kF32, {m, kK}, DeviceKind::kCuda),
                                   Tensor(w_, DType::kF32, {kN, kK}, DeviceKind::kCuda), Tensor(),
                                   /*gelu=*/false,
                                   Tensor(out_, DType::kF32, {m, kN}, DeviceKind::kCuda), &done);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(done) << "cuBLASLt has no algorithm for a plain fp32 GEMM";
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> got(m * kN);
    ASSERT_EQ(cudaMemcpy(got.data(), out_, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<double> ref(m * kN);
    double sq = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        double acc = 0.0;
        for (int64_t t = 0; t < kK; ++t) acc += double{x_host_[i * kK + t]} * w_host_[j * kK + t];
        ref[i * kN + j] = acc;
        sq += acc * acc;
      }
    }
    const double rms = std::sqrt(sq / ref.size());
    int bad = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
      const double err = std::fabs(got[e] - ref[e]);
      if (!(err <= 1e-5 * (std::fabs(ref[e]) + rms)) && ++bad <= 3) {  // NaN fails too
        ADD_FAILURE() << "element " << e << ": " << got[e] << " vs " << ref[e];
      }
    }
    EXPECT_EQ(bad, 0);
  }

  static constexpr size_t kWorkspace = 8u << 20;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  float *x_ = nullptr, *w_ = nullptr, *out_ = nullptr;
  std::vector<float> x_host_, w_host_;
  std::unique_ptr<LtGemm> gemm_;
};

TEST_P(LtGemmTest, EveryRowCountOfABucketIsExact) {
  for (int64_t m : {4, 3, 1, 2, 256, 129, 257, 512, 300, 4, 3}) CheckRows(m);
}

INSTANTIATE_TEST_SUITE_P(TimingOffAndOn, LtGemmTest, ::testing::Bool());

}  // namespace
}  // namespace blossom
