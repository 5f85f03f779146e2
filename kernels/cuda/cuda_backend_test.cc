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
//         orders against the CPU's fp64 lane sums; attention scores themselves are bit-identical,
//         see attention.cu); copies (embedding, gather, q) and argmax exact. Half inputs with an
//         fp32 output (the LM head): 1e-4, for tensor-core accumulation.
//   F16:  rtol 2e-3 (one half rounding of the output plus fp32 arithmetic).
//   BF16: rtol 1e-2 (one bf16 rounding is 2^-9 relative; stored residuals add one more).
// Each op's worst normalised error is printed at the end as "BLOSSOM_OP_ERROR {...}" lines, which
// tools/gpu/run_on_device.sh collects into the results file.
//
// Without a visible GPU every test reports SKIPPED with the reason.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/device.h"

namespace blossom {
namespace {

// ---- Error bookkeeping ----

struct ErrStats {
  double max_abs = 0.0;   // largest |gpu - cpu|
  double max_norm = 0.0;  // largest |gpu - cpu| / tolerance (<= 1 passes)
  int64_t cases = 0;
};

std::map<std::string, ErrStats>& Registry() {
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
::testing::Environment* const kErrorReport = ::testing::AddGlobalTestEnvironment(new ErrorReport);

double Rtol(DType dt, bool reduction_heavy) {
  switch (dt) {
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return reduction_heavy ? 2e-5 : 1e-5;
  }
}

::testing::AssertionResult Near(const std::string& op, const std::vector<float>& got,
                                const std::vector<float>& ref, double rtol) {
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
    const double tol = rtol * (std::fabs(ref[i]) + rms);
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
                                         << " elements outside rtol " << rtol << " (rms " << rms << "):" << first;
  }
  return ::testing::AssertionSuccess();
}

// ---- Data helpers ----

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The values a tensor of `dt` can hold: v rounded to dt and back.
std::vector<float> RoundTo(const std::vector<float>& v, DType dt) {
  if (dt == DType::kF32) return v;
  std::vector<uint16_t> h(v.size());
  ConvertFromF32(v.data(), h.data(), dt, v.size());
  std::vector<float> out(v.size());
  ConvertToF32(h.data(), dt, out.data(), v.size());
  return out;
}

std::vector<char> Encode(const std::vector<float>& v, DType dt) {
  std::vector<char> raw(v.size() * DTypeSize(dt));
  ConvertFromF32(v.data(), raw.data(), dt, v.size());
  return raw;
}

Tensor HostF32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}
Tensor HostI32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kI32, shape);
}

struct LinearCase {
  int64_t m, k, n;
};

std::string Name(const char* op, DType dt) { return std::string(op) + "/" + DTypeName(dt); }

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceQuery q = cuda::QueryDevices();
    if (q.count == 0) GTEST_SKIP() << "no GPU: " << q.reason;
    auto backend = CudaBackend::Create();
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

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};


// ---- Backend basics ----

TEST_F(CudaBackendTest, ReportsDeviceAndActivationDtypes) {
  EXPECT_EQ(gpu_->device(), DeviceKind::kCuda);
  EXPECT_EQ(gpu_->activation_dtype(DType::kBF16), DType::kBF16);
  EXPECT_EQ(gpu_->activation_dtype(DType::kF16), DType::kF16);
  EXPECT_EQ(gpu_->activation_dtype(DType::kF32), DType::kF32);
  std::printf("device: %s, GELU epilogue in use: f32 %d, f16 %d, bf16 %d\n", gpu_->device_name().c_str(),
              gpu_->gelu_epilogue_in_use(DType::kF32) ? 1 : 0, gpu_->gelu_epilogue_in_use(DType::kF16) ? 1 : 0,
              gpu_->gelu_epilogue_in_use(DType::kBF16) ? 1 : 0);
}

TEST_F(CudaBackendTest, AllocationFailureIsResourceExhaustedNamingTheBytes) {
  auto total = gpu_->TotalDeviceMemory();
  ASSERT_TRUE(total.ok());
  const size_t too_much = *total * 4;
  auto buf = gpu_->Allocate(too_much);
  ASSERT_FALSE(buf.ok());
  EXPECT_EQ(buf.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(buf.status().message().find(std::to_string(too_much)), std::string::npos) << buf.status();
  EXPECT_NE(buf.status().message().find("free"), std::string::npos) << buf.status();
  // The failure is not sticky.
  auto ok = gpu_->Allocate(1 << 20);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST_F(CudaBackendTest, FreeMemoryShrinksByAnAllocation) {
  auto before = gpu_->FreeDeviceMemory();
  ASSERT_TRUE(before.ok());
  auto buf = gpu_->Allocate(512ull << 20);
  ASSERT_TRUE(buf.ok());
  auto after = gpu_->FreeDeviceMemory();
  ASSERT_TRUE(after.ok());
  EXPECT_LE(*after + (256ull << 20), *before);
}

TEST_F(CudaBackendTest, KvBlocksThatFitUsesTheFreeMemoryFraction) {
  auto free_bytes = gpu_->FreeDeviceMemory();
  ASSERT_TRUE(free_bytes.ok());
  const size_t per_block = 1 << 20;
  auto blocks = gpu_->KvBlocksThatFit(per_block, 0.5);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_NEAR(static_cast<double>(*blocks), 0.5 * *free_bytes / per_block, 0.02 * *free_bytes / per_block);
  EXPECT_EQ(gpu_->KvBlocksThatFit(per_block, 1.5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->KvBlocksThatFit(*free_bytes * 4, 1.0).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(CudaBackendTest, ImportWeightRoundTripsThroughTheStagingBuffers) {
  // 80 MB of bf16: several 32 MiB staging chunks, both buffers reused.
  const int64_t rows = 4096, cols = 10000;
  std::vector<uint16_t> host(rows * cols);
  std::mt19937 rng(7);
  for (auto& v : host) v = static_cast<uint16_t>(rng());
  for (int pass = 0; pass < 2; ++pass) {  // twice: the second starts with both buffers in use
    auto w = gpu_->ImportWeight(Tensor(host.data(), DType::kBF16, {rows, cols}));
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->tensor.dtype, DType::kBF16);
    std::vector<uint16_t> back(host.size());
    ASSERT_TRUE(gpu_->CopyToHost(w->tensor, back.data()).ok());
    EXPECT_TRUE(back == host);
  }
}

TEST_F(CudaBackendTest, UpcastOptionImportsHalfWeightsAsF32) {
  CudaBackend::Options options;
  options.upcast_weights_to_f32 = true;
  auto backend = CudaBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->activation_dtype(DType::kBF16), DType::kF32);
  std::vector<float> v = RoundTo(Random(1000, 3), DType::kBF16);
  std::vector<char> raw = Encode(v, DType::kBF16);
  auto w = (*backend)->ImportWeight(Tensor(raw.data(), DType::kBF16, {10, 100}));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->tensor.dtype, DType::kF32);
  std::vector<float> back(v.size());
  ASSERT_TRUE((*backend)->CopyToHost(w->tensor, back.data()).ok());
  EXPECT_EQ(back, v);
}

// The contract for --quantize until CUDA kernels exist: a clear Unimplemented naming the mode and
// the backend (the server then refuses to start), never a silent dequantization.
TEST_F(CudaBackendTest, QuantizedImportIsUnimplementedAndNamesTheMode) {
  std::vector<char> raw = Encode(Random(64 * 32, 4), DType::kF32);
  const Tensor host(raw.data(), DType::kF32, {32, 64});
  for (WeightQuant quant : {WeightQuant::kInt8, WeightQuant::kInt4}) {
    auto w = gpu_->ImportLinearWeight(host, quant);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(w.status().message().find(WeightQuantName(quant)), std::string::npos) << w.status();
    EXPECT_NE(w.status().message().find("cuda"), std::string::npos) << w.status();
  }
  auto plain = gpu_->ImportLinearWeight(host, WeightQuant::kNone);
  EXPECT_TRUE(plain.ok()) << plain.status();
}

// ---- Embedding ----

TEST_F(CudaBackendTest, EmbeddingMatchesCpuWithVocabSlice) {
  for (DType dt : kFloatTypes) {
    for (int64_t hidden : {64, 65, 1024}) {
      for (int64_t T : {1, 7, 129}) {
        const int64_t rows = 300, begin = 100;
        std::vector<float> table = RoundTo(Random(rows * hidden, 11), dt);
        std::vector<char> table_raw = Encode(table, dt);
        std::vector<int32_t> ids(T);
        std::mt19937 rng(T + hidden);
        for (auto& id : ids) id = static_cast<int32_t>(rng() % 500);  // some outside [100, 400)
        std::vector<float> ref(T * hidden);
        ASSERT_TRUE(cpu_.Embedding(Tensor(table_raw.data(), dt, {rows, hidden}), HostI32(ids, {T}), begin,
                                   HostF32(ref, {T, hidden}))
                        .ok());
        Tensor gt = Upload(table, dt, {rows, hidden});
        Tensor out = Empty(dt, {T, hidden});
        ASSERT_TRUE(gpu_->Embedding(gt, UploadI32(ids, {T}), begin, out).ok());
        EXPECT_TRUE(Near(Name("Embedding", dt), Download(out), ref, 0.0)) << hidden << " " << T;
      }
    }
  }
}

// ---- LayerNorm ----

TEST_F(CudaBackendTest, LayerNormWithAndWithoutResidualMatchesCpu) {
  for (DType dt : kFloatTypes) {
    for (int64_t hidden : {64, 1000, 1023, 4096, 14336}) {
      for (int64_t T : {1, 7, 129}) {
        for (bool with_residual : {false, true}) {
          std::vector<float> x = RoundTo(Random(T * hidden, 21, 3.0f), dt);
          std::vector<float> res = RoundTo(Random(T * hidden, 22), dt);
          std::vector<float> gamma = RoundTo(Random(hidden, 23), dt), beta = RoundTo(Random(hidden, 24), dt);
          std::vector<char> g_raw = Encode(gamma, dt), b_raw = Encode(beta, dt);
          std::vector<float> ref(T * hidden), res_cpu = res;
          ASSERT_TRUE(cpu_.LayerNorm(HostF32(x, {T, hidden}), Tensor(g_raw.data(), dt, {hidden}),
                                     Tensor(b_raw.data(), dt, {hidden}), 1e-5f,
                                     with_residual ? HostF32(res_cpu, {T, hidden}) : Tensor(),
                                     HostF32(ref, {T, hidden}))
                          .ok());
          Tensor gres = Upload(res, dt, {T, hidden});
          Tensor out = Empty(dt, {T, hidden});
          ASSERT_TRUE(gpu_->LayerNorm(Upload(x, dt, {T, hidden}), Upload(gamma, dt, {hidden}),
                                      Upload(beta, dt, {hidden}), 1e-5f, with_residual ? gres : Tensor(), out)
                          .ok());
          EXPECT_TRUE(Near(Name("LayerNorm", dt), Download(out), ref, Rtol(dt, false)))
              << "hidden " << hidden << " T " << T << " residual " << with_residual;
          if (with_residual) {
            EXPECT_TRUE(Near(Name("LayerNorm.residual", dt), Download(gres), res_cpu, Rtol(dt, false)));
          }
        }
      }
    }
  }
}

// ---- Linear ----

TEST_F(CudaBackendTest, LinearWithBiasAndGeluMatchesCpu) {
  const LinearCase cases[] = {{1, 64, 64},    {7, 64, 192},     {129, 1024, 3072}, {7, 65, 67},
                              {129, 4096, 1024}, {1, 1024, 4096}, {33, 1000, 999},   {129, 80, 240}};
  for (DType dt : kFloatTypes) {
    for (const LinearCase& c : cases) {
      for (int variant = 0; variant < 3; ++variant) {  // no bias; bias; bias + gelu
        const Activation act = variant == 2 ? Activation::kBloomGelu : Activation::kNone;
        ExpectLinearMatchesCpu(c, dt, /*with_bias=*/variant >= 1, act, 31, variant == 2 ? "Linear+gelu" : "Linear");
      }
    }
  }
}

// With the GELU epilogue off, Linear takes its plainer plan (bias epilogue + the separate GELU
// kernel): the path a dtype whose epilogue failed the start-up probe, or a heuristic miss, runs.
TEST_F(CudaBackendTest, LinearWithoutTheGeluEpilogueMatchesCpu) {
  CudaBackend::Options options;
  options.allow_gelu_epilogue = false;
  auto plain = CudaBackend::Create(options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::unique_ptr<CudaBackend> fused = std::move(gpu_);
  gpu_ = std::move(*plain);
  for (DType dt : kFloatTypes) EXPECT_FALSE(gpu_->gelu_epilogue_in_use(dt)) << DTypeName(dt);
  const LinearCase cases[] = {{1, 1024, 4096}, {129, 1024, 3072}, {7, 65, 67}};
  for (DType dt : kFloatTypes) {
    for (const LinearCase& c : cases) {
      ExpectLinearMatchesCpu(c, dt, /*with_bias=*/true, Activation::kBloomGelu, 41, "Linear+gelu(separate)");
    }
  }
  keep_.clear();  // allocated from the plain backend, which goes now
  gpu_ = std::move(fused);
}

TEST_F(CudaBackendTest, LinearHalfInputsWithF32OutputLikeTheLmHead) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const int64_t m = 7, k = 256, n = 5000;
    std::vector<float> x = RoundTo(Random(m * k, 41), dt), w = RoundTo(Random(n * k, 42, 0.0625f), dt);
    std::vector<char> w_raw = Encode(w, dt);
    std::vector<float> ref(m * n);
    ASSERT_TRUE(cpu_.Linear(HostF32(x, {m, k}), Tensor(w_raw.data(), dt, {n, k}), Tensor(), Activation::kNone,
                            HostF32(ref, {m, n}))
                    .ok());
    Tensor out = Empty(DType::kF32, {m, n});
    ASSERT_TRUE(gpu_->Linear(Upload(x, dt, {m, k}), Upload(w, dt, {n, k}), Tensor(), Activation::kNone, out).ok());
    // fp32 output of exact half inputs: only the summation (tensor-core fp32 accumulation) differs.
    EXPECT_TRUE(Near(Name("Linear.f32out", dt), Download(out), ref, 1e-4));
  }
}

TEST_F(CudaBackendTest, LinearOnMisalignedViewsStillCorrect) {
  // Rows(1, ...) of an odd-width bf16 tensor is only 2-byte aligned: cuBLASLt must be asked for a
  // low-alignment kernel or the fallback GEMM must run.
  const DType dt = DType::kBF16;
  const int64_t m = 9, k = 63, n = 130;
  std::vector<float> x = RoundTo(Random((m + 1) * k, 51), dt), w = RoundTo(Random(n * k, 52, 0.125f), dt);
  std::vector<float> bias = RoundTo(Random(n, 53), dt);
  Tensor gx = Upload(x, dt, {m + 1, k}).Rows(1, m + 1);
  std::vector<float> x_tail(x.begin() + k, x.end());
  std::vector<char> w_raw = Encode(w, dt), b_raw = Encode(bias, dt);
  std::vector<float> ref(m * n);
  ASSERT_TRUE(cpu_.Linear(HostF32(x_tail, {m, k}), Tensor(w_raw.data(), dt, {n, k}), Tensor(b_raw.data(), dt, {n}),
                          Activation::kBloomGelu, HostF32(ref, {m, n}))
                  .ok());
  Tensor out = Empty(dt, {m + 1, n}).Rows(1, m + 1);
  ASSERT_TRUE(gpu_->Linear(gx, Upload(w, dt, {n, k}), Upload(bias, dt, {n}), Activation::kBloomGelu, out).ok());
  EXPECT_TRUE(Near(Name("Linear.misaligned", dt), Download(out), ref, Rtol(dt, true)));
}

TEST_F(CudaBackendTest, LinearRejectsMismatchedShapes) {
  Tensor x = Empty(DType::kF32, {2, 8}), w = Empty(DType::kF32, {4, 9}), out = Empty(DType::kF32, {2, 4});
  EXPECT_EQ(gpu_->Linear(x, w, Tensor(), Activation::kNone, out).code(), absl::StatusCode::kInvalidArgument);
}

// ---- AddBiasResidual ----

TEST_F(CudaBackendTest, AddBiasResidualMatchesCpu) {
  for (DType dt : kFloatTypes) {
    for (int64_t cols : {64, 65, 4096}) {
      for (int64_t T : {1, 7, 129}) {
        for (bool with_bias : {false, true}) {
          std::vector<float> x = RoundTo(Random(T * cols, 61), dt), r = RoundTo(Random(T * cols, 62), dt),
                             b = RoundTo(Random(cols, 63), dt);
          std::vector<float> ref = x;
          ASSERT_TRUE(cpu_.AddBiasResidual(HostF32(ref, {T, cols}), with_bias ? HostF32(b, {cols}) : Tensor(),
                                           HostF32(r, {T, cols}))
                          .ok());
          Tensor gx = Upload(x, dt, {T, cols});
          ASSERT_TRUE(gpu_->AddBiasResidual(gx, with_bias ? Upload(b, dt, {cols}) : Tensor(), Upload(r, dt, {T, cols}))
                          .ok());
          EXPECT_TRUE(Near(Name("AddBiasResidual", dt), Download(gx), ref, Rtol(dt, false)));
        }
      }
    }
  }
}

// ---- SplitQkvWriteCache + Attention ----

struct SeqSpec {
  int32_t ctx;      // context length after this step
  int32_t num_new;  // new tokens this step
};

struct Metadata {
  std::vector<int32_t> query_start{0}, context_len, block_tables, slots;
  int32_t max_query = 0, max_context = 0, max_blocks = 0;
};

// Builds step metadata for tokens [first, first + count) of each sequence; tables[s] is its
// block table, padded to max_blocks.
Metadata MakeStep(const std::vector<std::pair<int32_t, int32_t>>& ranges,
                  const std::vector<std::vector<int32_t>>& tables, int32_t max_blocks, int32_t bs) {
  Metadata md;
  md.max_blocks = max_blocks;
  for (size_t s = 0; s < ranges.size(); ++s) {
    const auto [first, count] = ranges[s];
    md.query_start.push_back(md.query_start.back() + count);
    md.context_len.push_back(first + count);
    std::vector<int32_t> t = tables[s];
    t.resize(max_blocks, 0);
    md.block_tables.insert(md.block_tables.end(), t.begin(), t.end());
    for (int32_t p = first; p < first + count; ++p) md.slots.push_back(tables[s][p / bs] * bs + p % bs);
    md.max_query = std::max(md.max_query, count);
    md.max_context = std::max(md.max_context, first + count);
  }
  return md;
}

class AttentionParity : public CudaBackendTest {
 protected:
  AttentionMetadata HostMd(Metadata& m) {
    AttentionMetadata md;
    md.num_seqs = static_cast<int32_t>(m.context_len.size());
    md.num_tokens = static_cast<int32_t>(m.slots.size());
    md.max_query_len = m.max_query;
    md.max_context_len = m.max_context;
    md.max_blocks_per_seq = m.max_blocks;
    md.query_start = HostI32(m.query_start, {md.num_seqs + 1});
    md.context_len = HostI32(m.context_len, {md.num_seqs});
    md.block_tables = HostI32(m.block_tables, {md.num_seqs, m.max_blocks});
    md.slot_mapping = HostI32(m.slots, {md.num_tokens});
    return md;
  }
  AttentionMetadata DeviceMd(Metadata& m) {
    AttentionMetadata md = HostMd(m);
    md.query_start = UploadI32(m.query_start, {md.num_seqs + 1});
    md.context_len = UploadI32(m.context_len, {md.num_seqs});
    md.block_tables = UploadI32(m.block_tables, {md.num_seqs, m.max_blocks});
    md.slot_mapping = UploadI32(m.slots, {md.num_tokens});
    return md;
  }

  // Writes the history (positions before each sequence's new tokens), then runs one step of new
  // tokens through SplitQkvWriteCache + Attention on both backends and compares q and the output.
  void Run(DType dt, int32_t heads, int32_t d, const std::vector<SeqSpec>& seqs, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << DTypeName(dt) << " heads " << heads << " d " << d << " seed " << seed);
    const int32_t bs = 16, layers = 2, layer = 1;
    int32_t blocks_total = 0, max_blocks = 0;
    for (const auto& s : seqs) {
      blocks_total += (s.ctx + bs - 1) / bs;
      max_blocks = std::max(max_blocks, (s.ctx + bs - 1) / bs);
    }
    const int32_t num_blocks = blocks_total + 5;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(pool.begin(), pool.end(), rng);  // scattered block tables
    std::vector<std::vector<int32_t>> tables;
    size_t next = 0;
    for (const auto& s : seqs) {
      tables.emplace_back(pool.begin() + next, pool.begin() + next + (s.ctx + bs - 1) / bs);
      next += (s.ctx + bs - 1) / bs;
    }
    KvCacheSpec spec;
    spec.num_layers = layers;
    spec.num_blocks = num_blocks;
    spec.block_size = bs;
    spec.num_heads = heads;
    spec.head_dim = d;
    spec.dtype = DType::kF32;
    auto cpu_cache = cpu_.CreateKvCache(spec);
    ASSERT_TRUE(cpu_cache.ok());
    spec.dtype = dt;
    auto gpu_cache = gpu_->CreateKvCache(spec);
    ASSERT_TRUE(gpu_cache.ok()) << gpu_cache.status();
    EXPECT_EQ((*gpu_cache)->spec().dtype, dt);
    const int64_t row = static_cast<int64_t>(heads) * 3 * d;

    auto split_both = [&](Metadata& m, uint32_t data_seed, std::vector<float>* q_cpu, Tensor* q_gpu,
                          AttentionMetadata* dmd) {
      const int64_t T = static_cast<int64_t>(m.slots.size());
      std::vector<float> qkv = RoundTo(Random(T * row, data_seed), dt);
      q_cpu->assign(T * heads * d, 0.0f);
      AttentionMetadata hmd = HostMd(m);
      ASSERT_TRUE(cpu_.SplitQkvWriteCache(HostF32(qkv, {T, row}), hmd, layer, **cpu_cache,
                                          HostF32(*q_cpu, {T, heads * d}))
                      .ok());
      *dmd = DeviceMd(m);
      *q_gpu = Empty(dt, {T, heads * d});
      absl::Status s = gpu_->SplitQkvWriteCache(Upload(qkv, dt, {T, row}), *dmd, layer, **gpu_cache, *q_gpu);
      ASSERT_TRUE(s.ok()) << s;
    };

    // History: everything before the new tokens, in one step (no attention needed).
    std::vector<std::pair<int32_t, int32_t>> hist, step;
    std::vector<std::vector<int32_t>> hist_tables;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].ctx > seqs[i].num_new) {
        hist.push_back({0, seqs[i].ctx - seqs[i].num_new});
        hist_tables.push_back(tables[i]);
      }
      step.push_back({seqs[i].ctx - seqs[i].num_new, seqs[i].num_new});
    }
    if (!hist.empty()) {
      Metadata hm = MakeStep(hist, hist_tables, max_blocks, bs);
      std::vector<float> q_cpu;
      Tensor q_gpu;
      AttentionMetadata dmd;
      split_both(hm, seed + 1, &q_cpu, &q_gpu, &dmd);
    }
    Metadata sm = MakeStep(step, tables, max_blocks, bs);
    std::vector<float> q_cpu;
    Tensor q_gpu;
    AttentionMetadata dmd;
    split_both(sm, seed + 2, &q_cpu, &q_gpu, &dmd);
    EXPECT_TRUE(Near(Name("SplitQkv.q", dt), Download(q_gpu), q_cpu, 0.0));

    std::vector<float> slopes(heads);
    for (int32_t h = 0; h < heads; ++h) slopes[h] = std::pow(2.0f, -8.0f * (h + 1) / heads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int64_t T = static_cast<int64_t>(sm.slots.size());
    std::vector<float> ref(T * heads * d);
    AttentionMetadata hmd = HostMd(sm);
    ASSERT_TRUE(cpu_.Attention(HostF32(q_cpu, {T, heads * d}), hmd, layer, **cpu_cache, HostF32(slopes, {heads}),
                               scale, HostF32(ref, {T, heads * d}))
                    .ok());
    Tensor out = Empty(dt, {T, heads * d});
    absl::Status s = gpu_->Attention(q_gpu, dmd, layer, **gpu_cache, Upload(slopes, DType::kF32, {heads}), scale, out);
    ASSERT_TRUE(s.ok()) << s;
    const char* kind = sm.max_query == 1 ? "Attention.decode" : "Attention.prefill";
    EXPECT_TRUE(Near(Name(kind, dt), Download(out), ref, Rtol(dt, true)));
    ASSERT_TRUE(gpu_->Synchronize().ok());
  }
};

TEST_F(AttentionParity, PrefillOnly) {
  for (DType dt : kFloatTypes) {
    Run(dt, 4, 16, {{7, 7}}, 100);
    Run(dt, 1, 64, {{129, 129}}, 101);
    Run(dt, 6, 7, {{33, 33}, {20, 20}}, 102);  // odd head_dim
    Run(dt, 2, 256, {{40, 40}}, 103);
    Run(dt, 16, 80, {{1, 1}, {17, 17}}, 104);
  }
}

TEST_F(AttentionParity, DecodeOverLongScatteredContexts) {
  for (DType dt : kFloatTypes) {
    // 512 keys per decode partition: 512 and 513 straddle the split, 2048 uses four partitions.
    Run(dt, 4, 64, {{1, 1}, {17, 1}, {512, 1}, {513, 1}, {2048, 1}, {1000, 1}}, 200);
    Run(dt, 32, 128, {{300, 1}, {16, 1}}, 201);
    Run(dt, 3, 80, {{700, 1}}, 202);
    Run(dt, 2, 256, {{600, 1}}, 203);  // head_dim above the block's thread count
    Run(dt, 5, 7, {{100, 1}, {1500, 1}}, 204);
  }
}

TEST_F(AttentionParity, MixedPrefillChunksAndDecode) {
  for (DType dt : kFloatTypes) {
    Run(dt, 8, 64, {{300, 129}, {50, 1}, {2000, 1}, {7, 7}}, 300);
    Run(dt, 4, 96, {{129, 7}, {1, 1}, {640, 33}}, 301);
  }
}

TEST_F(CudaBackendTest, BadSlotIsReportedAtTheNextSynchronize) {
  KvCacheSpec spec;
  spec.num_layers = 1;
  spec.num_blocks = 2;
  spec.block_size = 16;
  spec.num_heads = 2;
  spec.head_dim = 8;
  spec.dtype = DType::kF32;
  auto cache = gpu_->CreateKvCache(spec);
  ASSERT_TRUE(cache.ok());
  std::vector<int32_t> qs = {0, 1}, cl = {1}, bt = {0}, slots = {32};  // pool has 32 slots
  AttentionMetadata md;
  md.num_seqs = 1;
  md.num_tokens = 1;
  md.max_query_len = 1;
  md.max_context_len = 1;
  md.max_blocks_per_seq = 1;
  md.query_start = UploadI32(qs, {2});
  md.context_len = UploadI32(cl, {1});
  md.block_tables = UploadI32(bt, {1, 1});
  md.slot_mapping = UploadI32(slots, {1});
  ASSERT_TRUE(gpu_->SplitQkvWriteCache(Empty(DType::kF32, {1, 48}), md, 0, **cache, Empty(DType::kF32, {1, 16})).ok());
  absl::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("slot"), std::string::npos) << s;
  EXPECT_TRUE(gpu_->Synchronize().ok());  // reported once, then cleared
}

// ---- GatherRows, Softmax, Argmax ----

TEST_F(CudaBackendTest, GatherRowsMatchesCpu) {
  for (DType dt : kFloatTypes) {
    for (int64_t cols : {64, 65, 4096}) {
      const int64_t rows = 129;
      std::vector<float> x = RoundTo(Random(rows * cols, 71), dt);
      std::vector<int32_t> idx = {128, 0, 5, 5, 77, 1, 64};
      const int64_t n = idx.size();
      std::vector<float> ref(n * cols);
      ASSERT_TRUE(cpu_.GatherRows(HostF32(x, {rows, cols}), HostI32(idx, {n}), HostF32(ref, {n, cols})).ok());
      Tensor out = Empty(dt, {n, cols});
      ASSERT_TRUE(gpu_->GatherRows(Upload(x, dt, {rows, cols}), UploadI32(idx, {n}), out).ok());
      EXPECT_TRUE(Near(Name("GatherRows", dt), Download(out), ref, 0.0));
    }
  }
  std::vector<int32_t> bad = {3};
  ASSERT_TRUE(gpu_->GatherRows(Empty(DType::kF32, {2, 4}), UploadI32(bad, {1}), Empty(DType::kF32, {1, 4})).ok());
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaBackendTest, SoftmaxMatchesCpuOverTheFullVocabulary) {
  for (DType dt : kFloatTypes) {
    for (int64_t cols : {33, 1000, 250880}) {
      for (int64_t rows : {1, 7}) {
        std::vector<float> x = RoundTo(Random(rows * cols, 81, 4.0f), dt);
        std::vector<float> ref(rows * cols);
        ASSERT_TRUE(cpu_.Softmax(HostF32(x, {rows, cols}), HostF32(ref, {rows, cols})).ok());
        Tensor out = Empty(DType::kF32, {rows, cols});
        ASSERT_TRUE(gpu_->Softmax(Upload(x, dt, {rows, cols}), out).ok());
        EXPECT_TRUE(Near(Name("Softmax", dt), Download(out), ref, 1e-5));
      }
    }
  }
  // In place (f32).
  std::vector<float> x = Random(3 * 500, 82), ref(3 * 500);
  ASSERT_TRUE(cpu_.Softmax(HostF32(x, {3, 500}), HostF32(ref, {3, 500})).ok());
  Tensor gx = Upload(x, DType::kF32, {3, 500});
  ASSERT_TRUE(gpu_->Softmax(gx, gx).ok());
  EXPECT_TRUE(Near("Softmax.inplace/f32", Download(gx), ref, 1e-5));
}

TEST_F(CudaBackendTest, ArgmaxMatchesCpuWithTiesToTheLowestIndex) {
  for (DType dt : kFloatTypes) {
    for (int64_t cols : {1, 33, 250880}) {
      const int64_t rows = 7;
      std::vector<float> x = RoundTo(Random(rows * cols, 91), dt);
      // Row r: the maximum appears at several indices.
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j : {cols - 1, cols / 2, cols / 3 + r}) {
          if (j >= 0 && j < cols) x[r * cols + j] = 100.0f;
        }
      }
      std::vector<int32_t> ref(rows);
      ASSERT_TRUE(cpu_.Argmax(HostF32(x, {rows, cols}), HostI32(ref, {rows})).ok());
      Tensor out = Empty(DType::kI32, {rows});
      ASSERT_TRUE(gpu_->Argmax(Upload(x, dt, {rows, cols}), out).ok());
      EXPECT_EQ(DownloadI32(out), ref) << DTypeName(dt) << " cols " << cols;
      Registry()[Name("Argmax", dt)].cases++;
    }
  }
}

}  // namespace
}  // namespace blossom
