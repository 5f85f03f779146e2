#include "kernels/cpu/gemm.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Naive reference in double.
std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>* bias, int64_t m, int64_t n, int64_t k,
                             bool gelu) {
  std::vector<float> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * w[j * k + p];
      float v = static_cast<float>(acc) + (bias ? (*bias)[j] : 0.0f);
      out[i * n + j] = gelu ? BloomGelu(v) : v;
    }
  return out;
}

struct Shape {
  int64_t m, n, k;
};

class GemmShapes : public ::testing::TestWithParam<Shape> {};

// Tolerance: fp32 accumulation over K terms of unit-variance products: ~1e-6 * sqrt(K) relative.
TEST_P(GemmShapes, MatchesReferenceForEveryWeightDtype) {
  const Shape s = GetParam();
  std::mt19937 rng(s.m * 1000 + s.n * 10 + s.k);
  std::vector<float> x = Random(s.m * s.k, rng), w = Random(s.n * s.k, rng),
                     bias = Random(s.n, rng);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    // Round weights to the dtype first so the reference sees the same values.
    std::vector<uint16_t> half(w.size());
    std::vector<float> w_rounded(w.size());
    const void* w_ptr = w.data();
    if (dtype != DType::kF32) {
      ConvertFromF32(w.data(), half.data(), dtype, w.size());
      ConvertToF32(half.data(), dtype, w_rounded.data(), w.size());
      w_ptr = half.data();
    } else {
      w_rounded = w;
    }
    for (bool gelu : {false, true}) {
      std::vector<float> out(s.m * s.n, -7.0f);
      GemmArgs args;
      args.x = x.data();
      args.w = w_ptr;
      args.w_dtype = dtype;
      args.bias = bias.data();
      args.out = out.data();
      args.m = s.m;
      args.n = s.n;
      args.k = s.k;
      args.activation = gelu ? Activation::kBloomGelu : Activation::kNone;
      ThreadPool pool(3);
      GemmNT(args, &pool);
      std::vector<float> ref = Reference(x, w_rounded, &bias, s.m, s.n, s.k, gelu);
      const float tol = 1e-5f * std::sqrt(static_cast<float>(s.k)) + 1e-6f;
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], ref[i], tol * (1.0f + std::fabs(ref[i])))
            << "dtype " << DTypeName(dtype) << " gelu " << gelu << " index " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmShapes,
                         ::testing::Values(Shape{1, 1, 1}, Shape{1, 4, 8}, Shape{3, 5, 7},
                                           Shape{4, 4, 16}, Shape{5, 9, 33}, Shape{17, 31, 64},
                                           Shape{2, 250, 96}, Shape{33, 65, 257}));

// Batch invariance: a row's result is bit-identical whatever the other rows and thread count.
TEST(GemmTest, RowResultsIndependentOfBatchAndThreads) {
  std::mt19937 rng(42);
  const int64_t n = 37, k = 203;
  std::vector<float> w = Random(n * k, rng), big_x = Random(13 * k, rng);
  std::vector<float> batched(13 * n);
  GemmArgs args;
  args.w = w.data();
  args.n = n;
  args.k = k;
  ThreadPool pool4(4), pool1(1);
  args.x = big_x.data();
  args.out = batched.data();
  args.m = 13;
  GemmNT(args, &pool4);
  for (int64_t row = 0; row < 13; ++row) {
    std::vector<float> single(n);
    args.x = big_x.data() + row * k;
    args.out = single.data();
    args.m = 1;
    GemmNT(args, &pool1);
    ASSERT_EQ(0, std::memcmp(single.data(), batched.data() + row * n, n * sizeof(float)))
        << "row " << row;
  }
}

TEST(GemmTest, BloomGeluMatchesFormula) {
  for (float x : {-3.0f, -0.5f, 0.0f, 0.1f, 2.0f}) {
    double ref = x * 0.5 * (1.0 + std::tanh(0.79788456 * x * (1 + 0.044715 * x * x)));
    EXPECT_NEAR(BloomGelu(x), ref, 1e-6);
  }
}

}  // namespace
}  // namespace blossom
