// The shared part of the CudaBackend parity tests, split by topic from one cuda_backend_test.cc:
// cuda_backend_basics_test (device, memory, weight import), cuda_backend_ops_test (embedding,
// norms, linears, elementwise, gather, softmax, argmax) and cuda_backend_attention_test
// (SplitQkvWriteCache + paged attention). Header-only: the CudaBackendTest fixture, the
// tolerance check and the data helpers; each test binary includes it once.
//
// Parity of every CudaBackend op with the CPU reference backend, on fresh random inputs of
// realistic and odd sizes, in F32, F16 and BF16.
//
// Inputs are generated in fp32, rounded to the dtype under test, and the same rounded values go to
// both backends (the CPU backend takes fp32 activations and F16/BF16 weights), so the comparison
// measures only the GPU's arithmetic and its output rounding.
//
// Tolerance (per element): |gpu - cpu| <= rtol * (|cpu| + rms(cpu)). The rms term keeps
// elements near zero (cancellation in a dot product) from demanding an impossible relative error.
//   F32:  rtol 1e-5 (Linear and Attention 2e-5: cuBLASLt's and the tiled kernels' summation
//         orders against the CPU's lane sums); copies (embedding, gather, q) and argmax exact.
//         Half inputs with an fp32 output (the LM head): 1e-4, for tensor-core accumulation.
//   Attention adds an absolute term (AlibiScoreAtol): an ALiBi score at key position j is
//         slope * j + dot * scale, known in fp32 only to an ulp of its size, and the GPU and CPU
//         form the dot in different orders, so a score may round one ulp apart; each softmax
//         weight then differs by that much relatively, and the output by up to
//         FLT_EPSILON * max|score| * max|v|. Measured on an H200: a 1100-token context with
//         slope 1/4 (|score| ~ 275) put 17 of 343,552 f32 outputs 1e-5 apart, above rtol alone.
//   F16:  rtol 2e-3 (one half rounding of the output plus fp32 arithmetic).
//   BF16: rtol 1e-2 (one bf16 rounding is 2^-9 relative; stored residuals add one more).
// Each op's worst normalised error is printed at the end as "BLOSSOM_OP_ERROR {...}" lines, which
// tools/gpu/run_on_device.sh collects into the results file.
//
// Without a visible GPU every test reports SKIPPED with the reason.
#ifndef BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_TEST_UTIL_H_
#define BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_backend_test_util.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"

namespace blossom::cuda_backend_testing {

// ---- Error bookkeeping ----

struct ErrStats {
  double max_abs = 0.0;   // largest |gpu - cpu|
  double max_norm = 0.0;  // largest |gpu - cpu| / tolerance (<= 1 passes)
  int64_t cases = 0;
};

inline std::map<std::string, ErrStats>& Registry() {
  static auto* registry = new std::map<std::string, ErrStats>();
  return *registry;
}

class ErrorReport : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [op, s] : Registry()) {
      std::printf("BLOSSOM_OP_ERROR {\"op\": \"%s\", \"max_abs\": %.3g, \"max_over_tolerance\": %.3g, "
                  "\"cases\": %lld}\n",
                  op.c_str(), s.max_abs, s.max_norm, static_cast<long long>(s.cases));
    }
  }
};
inline ::testing::Environment* const kErrorReport = ::testing::AddGlobalTestEnvironment(new ErrorReport);

inline double Rtol(DType dt, bool reduction_heavy) {
  switch (dt) {
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return reduction_heavy ? 2e-5 : 1e-5;
  }
}

// Tolerance of attention outputs for the score rounding (see the header comment): |score| reaches
// max_slope * max_context plus the dot's part, bounded by max|q| * max|k| * head_dim * scale.
inline double AlibiScoreAtol(double max_slope, int64_t max_context, double max_abs_qkv, int64_t head_dim,
                             double scale) {
  const double max_score = max_slope * static_cast<double>(max_context) +
                           max_abs_qkv * max_abs_qkv * static_cast<double>(head_dim) * scale;
  return std::numeric_limits<float>::epsilon() * max_score * max_abs_qkv;
}

// Per element: |got - ref| <= rtol * (|ref| + rms(ref)) + atol; non-finite values must match.
inline ::testing::AssertionResult Near(const std::string& op, const std::vector<float>& got,
                                       const std::vector<float>& ref, double rtol, double atol = 0.0) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << op << ": size " << got.size() << " vs " << ref.size();
  }
  double ss = 0.0;
  for (float r : ref) ss += static_cast<double>(r) * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(ss / ref.size());
  ErrStats& stats = Registry()[op];
  ++stats.cases;
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double tol = rtol * (std::fabs(ref[i]) + rms) + atol;
    const double norm = tol > 0 ? diff / tol : (diff == 0 ? 0.0 : INFINITY);
    const bool ok = std::isfinite(got[i]) == std::isfinite(ref[i]) && (diff <= tol || diff == 0.0);
    stats.max_abs = std::max(stats.max_abs, std::isfinite(diff) ? diff : INFINITY);
    stats.max_norm = std::max(stats.max_norm, std::isfinite(norm) ? norm : INFINITY);
    if (!ok && bad++ < 5) {
      first += " [" + std::to_string(i) + "] gpu " + std::to_string(got[i]) + " cpu " + std::to_string(ref[i]);
    }
  }
  if (bad > 0) {
    return ::testing::AssertionFailure() << op << ": " << bad << " of " << got.size()
                                         << " elements outside rtol " << rtol << " + atol " << atol << " (rms " << rms
                                         << "):" << first;
  }
  return ::testing::AssertionSuccess();
}

// ---- Data helpers ----

using cpu_test::Random;  // the CPU twin's tests draw the same values

// The values a tensor of `dt` can hold: v rounded to dt and back.
inline std::vector<float> RoundTo(const std::vector<float>& v, DType dt) {
  if (dt == DType::kF32) return v;
  std::vector<uint16_t> h(v.size());
  ConvertFromF32(v.data(), h.data(), dt, v.size());
  std::vector<float> out(v.size());
  ConvertToF32(h.data(), dt, out.data(), v.size());
  return out;
}

inline std::vector<char> Encode(const std::vector<float>& v, DType dt) {
  std::vector<char> raw(v.size() * DTypeSize(dt));
  ConvertFromF32(v.data(), raw.data(), dt, v.size());
  return raw;
}

inline Tensor HostF32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}
inline Tensor HostI32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kI32, shape);
}

struct LinearCase {
  int64_t m, k, n;
};

inline std::string Name(const char* op, DType dt) { return std::string(op) + "/" + DTypeName(dt); }

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceQuery q = cuda::QueryDevices();
    if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
    UseBackend(CudaBackend::Options());
  }

  // Puts a backend made with `options` under test (the tensors kept from the previous one are
  // freed first). Call it as ASSERT_NO_FATAL_FAILURE(UseBackend(options)).
  void UseBackend(const CudaBackend::Options& options) {
    keep_.clear();
    auto backend = CudaBackend::Create(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    gpu_ = std::move(*backend);
  }

  // A device tensor holding v rounded to dt.
  Tensor Upload(const std::vector<float>& v, DType dt, std::initializer_list<int64_t> shape) {
    auto owned = gpu_->AllocateTensor(dt, shape);
    EXPECT_TRUE(owned.ok()) << owned.status();
    if (!owned.ok()) return Tensor();
    std::vector<char> raw = Encode(v, dt);
    EXPECT_TRUE(gpu_->CopyToDevice(raw.data(), owned->tensor).ok());
    keep_.push_back(std::move(*owned));
    return keep_.back().tensor;
  }
  Tensor UploadI32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
    auto owned = gpu_->AllocateTensor(DType::kI32, shape);
    EXPECT_TRUE(owned.ok()) << owned.status();
    if (!owned.ok()) return Tensor();
    EXPECT_TRUE(gpu_->CopyToDevice(v.data(), owned->tensor).ok());
    keep_.push_back(std::move(*owned));
    return keep_.back().tensor;
  }
  Tensor Empty(DType dt, std::initializer_list<int64_t> shape) {
    auto owned = gpu_->AllocateTensor(dt, shape);
    EXPECT_TRUE(owned.ok()) << owned.status();
    if (!owned.ok()) return Tensor();
    keep_.push_back(std::move(*owned));
    return keep_.back().tensor;
  }
  std::vector<float> Download(const Tensor& t) {
    std::vector<char> raw(t.bytes());
    absl::Status s = gpu_->CopyToHost(t, raw.data());
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> out(t.numel());
    ConvertToF32(raw.data(), t.dtype, out.data(), out.size());
    return out;
  }
  std::vector<int32_t> DownloadI32(const Tensor& t) {
    std::vector<int32_t> out(t.numel());
    absl::Status s = gpu_->CopyToHost(t, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // Half inputs, an fp32 output and no bias (the LM head's Linear) against the CPU backend: exact
  // half inputs, so only the summation order (fp32 accumulation) differs (rtol 1e-4).
  void ExpectF32OutLinearMatchesCpu(const LinearCase& c, DType dt, uint32_t seed, const char* op) {
    std::vector<float> x = RoundTo(Random(c.m * c.k, seed), dt), w = RoundTo(Random(c.n * c.k, seed + 1, 0.0625f), dt);
    std::vector<char> w_raw = Encode(w, dt);
    std::vector<float> ref(c.m * c.n);
    ASSERT_TRUE(cpu_.Linear(HostF32(x, {c.m, c.k}), Tensor(w_raw.data(), dt, {c.n, c.k}), Tensor(), Activation::kNone,
                            HostF32(ref, {c.m, c.n}))
                    .ok());
    Tensor out = Empty(DType::kF32, {c.m, c.n});
    ASSERT_TRUE(
        gpu_->Linear(Upload(x, dt, {c.m, c.k}), Upload(w, dt, {c.n, c.k}), Tensor(), Activation::kNone, out).ok());
    EXPECT_TRUE(Near(Name(op, dt), Download(out), ref, 1e-4)) << "m " << c.m;
  }

  // gpu_->Linear against the CPU backend on random operands rounded to `dt` (seeds seed..seed+2).
  void ExpectLinearMatchesCpu(const LinearCase& c, DType dt, bool with_bias, Activation act, uint32_t seed,
                              const char* op) {
    std::vector<float> x = RoundTo(Random(c.m * c.k, seed), dt);
    std::vector<float> w = RoundTo(Random(c.n * c.k, seed + 1, 1.0f / std::sqrt(float(c.k))), dt);
    std::vector<float> bias = RoundTo(Random(c.n, seed + 2), dt);
    std::vector<char> w_raw = Encode(w, dt), b_raw = Encode(bias, dt);
    std::vector<float> ref(c.m * c.n);
    ASSERT_TRUE(cpu_.Linear(HostF32(x, {c.m, c.k}), Tensor(w_raw.data(), dt, {c.n, c.k}),
                            with_bias ? Tensor(b_raw.data(), dt, {c.n}) : Tensor(), act, HostF32(ref, {c.m, c.n}))
                    .ok());
    Tensor out = Empty(dt, {c.m, c.n});
    absl::Status s = gpu_->Linear(Upload(x, dt, {c.m, c.k}), Upload(w, dt, {c.n, c.k}),
                                  with_bias ? Upload(bias, dt, {c.n}) : Tensor(), act, out);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(Near(Name(op, dt), Download(out), ref, Rtol(dt, true)))
        << "m " << c.m << " k " << c.k << " n " << c.n << " bias " << with_bias;
  }

  CpuBackend cpu_{4};
  std::unique_ptr<CudaBackend> gpu_;
  std::vector<OwnedTensor> keep_;
};

inline constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

}  // namespace blossom::cuda_backend_testing

#endif  // BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_TEST_UTIL_H_
