// The CPU backend's ops other than attention: embedding, LayerNorm, the Linear weight layouts
// (fp32 row pairs, bf16 and quantized panels) and their numerics, gather, softmax and argmax.
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/bf16_panel_gemm.h"
#include "kernels/cpu/cpu_backend_test_util.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_amx.h"
#include "kernels/cpu/quant_panel_tile.h"

namespace blossom {
namespace {

using cpu_test::F32;
using cpu_test::I32;
using cpu_test::Random;

TEST(CpuBackendTest, EmbeddingWithVocabOffsetAndHalfTable) {
  CpuBackend backend(2);
  std::vector<float> table = Random(10 * 6, 1);
  std::vector<uint16_t> table_h(table.size());
  ConvertFromF32(table.data(), table_h.data(), DType::kF16, table.size());
  std::vector<int32_t> ids = {12, 15, 3, 19, 10};  // rows 10..19 live here
  std::vector<float> out(5 * 6, -1.0f);
  ASSERT_TRUE(backend
                  .Embedding(Tensor(table_h.data(), DType::kF16, {10, 6}), I32(ids, {5}), 10,
                             F32(out, {5, 6}))
                  .ok());
  for (int t = 0; t < 5; ++t) {
    for (int i = 0; i < 6; ++i) {
      float expected = 0.0f;
      if (ids[t] >= 10 && ids[t] < 20) expected = HalfToFloat(table_h[(ids[t] - 10) * 6 + i]);
      EXPECT_EQ(out[t * 6 + i], expected) << t << "," << i;
    }
  }
}

// A tied LM head's table (ImportEmbeddingAndLinearWeight): row-paired on AVX-512, and Embedding
// reads the same rows from it as from the checkpoint's, odd last row included; Linear over it
// gives the row-major bits.
TEST(CpuBackendTest, EmbeddingAndLinearTableServesBothOps) {
  CpuBackend backend(2);
  const int64_t vocab = 11, hidden = 16;
  std::vector<float> table = Random(vocab * hidden, 3);
  std::vector<uint16_t> table_bf16(table.size());
  ConvertFromF32(table.data(), table_bf16.data(), DType::kBF16, table.size());
  const Tensor rows(table_bf16.data(), DType::kBF16, {vocab, hidden});
  absl::StatusOr<OwnedTensor> imported = backend.ImportEmbeddingAndLinearWeight(rows, nullptr);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->tensor.dtype,
            BestGemmIsa() == GemmIsa::kAvx512 ? DType::kBF16Pairs : DType::kBF16);
  std::vector<int32_t> ids = {100, 110, 103, 99, 111, 107};  // rows 100..110 live here
  std::vector<float> want(ids.size() * hidden), got(ids.size() * hidden, -1.0f);
  ASSERT_TRUE(backend.Embedding(rows, I32(ids, {6}), 100, F32(want, {6, hidden})).ok());
  ASSERT_TRUE(backend.Embedding(imported->tensor, I32(ids, {6}), 100, F32(got, {6, hidden})).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[1 * hidden + 3], BF16ToFloat(table_bf16[10 * hidden + 3]));  // the odd last row
  std::vector<float> x = Random(2 * hidden, 4), head_rows(2 * vocab), head_table(2 * vocab);
  ASSERT_TRUE(backend.Linear(F32(x, {2, hidden}), rows, Tensor(), Activation::kNone,
                             F32(head_rows, {2, vocab})).ok());
  ASSERT_TRUE(backend.Linear(F32(x, {2, hidden}), imported->tensor, Tensor(), Activation::kNone,
                             F32(head_table, {2, vocab})).ok());
  EXPECT_EQ(head_table, head_rows);
}

TEST(CpuBackendTest, LayerNormWithAndWithoutResidual) {
  CpuBackend backend(2);
  const int rows = 5, hidden = 37;
  std::vector<float> x = Random(rows * hidden, 2, 3.0f), gamma = Random(hidden, 3),
                     beta = Random(hidden, 4), residual = Random(rows * hidden, 5);
  std::vector<float> residual_before = residual, out(rows * hidden), out2(rows * hidden);
  ASSERT_TRUE(backend
                  .LayerNorm(F32(x, {rows, hidden}), F32(gamma, {hidden}), F32(beta, {hidden}),
                             1e-5f, Tensor(), F32(out, {rows, hidden}))
                  .ok());
  ASSERT_TRUE(backend
                  .LayerNorm(F32(x, {rows, hidden}), F32(gamma, {hidden}), F32(beta, {hidden}),
                             1e-5f, F32(residual, {rows, hidden}), F32(out2, {rows, hidden}))
                  .ok());
  for (int r = 0; r < rows; ++r) {
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<double> in(hidden);
      for (int i = 0; i < hidden; ++i)
        in[i] = pass == 0 ? x[r * hidden + i]
                          : double(float(x[r * hidden + i] + residual_before[r * hidden + i]));
      double mean = std::accumulate(in.begin(), in.end(), 0.0) / hidden, var = 0;
      for (double v : in) var += (v - mean) * (v - mean);
      var /= hidden;
      for (int i = 0; i < hidden; ++i) {
        double ref = (in[i] - mean) / std::sqrt(var + 1e-5) * gamma[i] + beta[i];
        float got = pass == 0 ? out[r * hidden + i] : out2[r * hidden + i];
        ASSERT_NEAR(got, ref, 1e-5 * (1 + std::fabs(ref)));
        if (pass == 1) {
          ASSERT_EQ(residual[r * hidden + i], float(in[i]));  // updated in place
        }
      }
    }
  }
}

TEST(CpuBackendTest, LinearRejectsMismatchedShapes) {
  CpuBackend backend(1);
  std::vector<float> x(2 * 3), w(4 * 5), out(2 * 4);
  absl::Status s = backend.Linear(F32(x, {2, 3}), F32(w, {4, 5}), Tensor(), Activation::kNone,
                                  F32(out, {2, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Linear"), std::string::npos);
}

// A quantized Linear stays close to the fp32 one (int8: ~1% of the output's scale, int4 ~10%).
TEST(CpuBackendTest, QuantizedLinearIsCloseToFp32) {
  CpuBackend backend(2);
  const int64_t m = 5, n = 24, k = 128;
  std::vector<float> x = Random(m * k, 21), w = Random(n * k, 22, 0.05f), bias = Random(n, 23);
  std::vector<float> ref(m * n), out(m * n);
  ASSERT_TRUE(backend.Linear(F32(x, {m, k}), F32(w, {n, k}), F32(bias, {n}), Activation::kNone,
                             F32(ref, {m, n})).ok());
  double ref_rms = 0;
  for (float v : ref) ref_rms += double(v) * v;
  ref_rms = std::sqrt(ref_rms / ref.size());
  for (auto [quant, tolerance] : {std::pair{WeightQuant::kInt8, 0.02}, std::pair{WeightQuant::kInt4, 0.2}}) {
    absl::StatusOr<OwnedTensor> packed = backend.ImportLinearWeight(F32(w, {n, k}), quant);
    ASSERT_TRUE(packed.ok()) << packed.status();
    EXPECT_EQ(packed->tensor.dtype, QuantizedDType(quant));
    ASSERT_TRUE(backend.Linear(F32(x, {m, k}), packed->tensor, F32(bias, {n}), Activation::kNone,
                               F32(out, {m, n})).ok());
    double max_error = 0;
    for (size_t i = 0; i < out.size(); ++i) max_error = std::max(max_error, double(std::fabs(out[i] - ref[i])));
    EXPECT_LT(max_error, tolerance * ref_rms) << WeightQuantName(quant);
    EXPECT_GT(max_error, 0.0) << WeightQuantName(quant) << ": quantization must change something";
  }
}

// int8 and int4 with 16 rows to a panel: on a CPU with AVX512-VNNI the panel layouts
// (quant_panel_tile.h; int8 only where AMX-INT8 is not usable), whose Linear gives the row-major
// weight's bits at decode and prefill batch sizes; elsewhere the row-major kQ8G32 / kQ4G32.
TEST(CpuBackendTest, QuantizedWeightsArePanelPackedOnAvx512VnniWithTheRowMajorBits) {
  CpuBackend backend(2);
  const bool vnni = BestGemmIsa() != GemmIsa::kPortable && QuantPanelTileAvx512VnniUsable();
  const int64_t n = 48, k = 96;
  std::vector<float> w = Random(n * k, 31, 0.05f), bias = Random(n, 32);
  for (WeightQuant quant : {WeightQuant::kInt8, WeightQuant::kInt4}) {
    const DType row_dtype = QuantizedDType(quant);
    const DType panel_dtype = quant == WeightQuant::kInt8 ? DType::kQ8G32Panel16 : DType::kQ4G32Panel16;
    const bool panels = vnni && (quant == WeightQuant::kInt4 || !AmxInt8Usable());
    absl::StatusOr<OwnedTensor> imported = backend.ImportLinearWeight(F32(w, {n, k}), quant);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->tensor.dtype, panels ? panel_dtype : row_dtype);
    std::vector<char> rows(DTypeBytes(row_dtype, k) * n);
    ASSERT_TRUE(QuantizeWeightRows(w.data(), DType::kF32, n, k, row_dtype, rows.data()).ok());
    const Tensor row_major(rows.data(), row_dtype, {n, k});
    for (int64_t m : {1, 3, 8, 13}) {
      std::vector<float> x = Random(m * k, 33), want(m * n), got(m * n);
      ASSERT_TRUE(backend.Linear(F32(x, {m, k}), row_major, F32(bias, {n}), Activation::kBloomGelu,
                                 F32(want, {m, n})).ok());
      ASSERT_TRUE(backend.Linear(F32(x, {m, k}), imported->tensor, F32(bias, {n}), Activation::kBloomGelu,
                                 F32(got, {m, n})).ok());
      EXPECT_EQ(got, want) << WeightQuantName(quant) << " m " << m;
    }
    // A panel weight whose rows do not fill its panels is refused, not read past its end.
    if (panels) {
      const Tensor short_view(imported->tensor.data, panel_dtype, {40, k});
      std::vector<float> x(k), out(40);
      EXPECT_EQ(backend.Linear(F32(x, {1, k}), short_view, Tensor(), Activation::kNone, F32(out, {1, 40})).code(),
                absl::StatusCode::kInvalidArgument);
    }
  }
}

// --quantize bf16: a kBF16Panel16 copy (rows padded to whole panels) whose Linear is the bf16
// GEMM's (bf16_panel_gemm.h, the same bits) at decode and prefill batch sizes, from f32 and bf16
// checkpoints; close to the fp32 Linear (rounding x and the weights to bf16: under 1% of the
// output's scale) but not equal to it. An odd row length is refused.
TEST(CpuBackendTest, Bf16QuantizeRunsTheBf16GemmOnPanels) {
  CpuBackend backend(2);
  const int64_t n = 29, k = 64;
  std::vector<float> w = Random(n * k, 41, 0.05f), bias = Random(n, 42);
  std::vector<uint16_t> w_bf16(w.size());
  ConvertFromF32(w.data(), w_bf16.data(), DType::kBF16, w.size());
  for (const Tensor& rows : {F32(w, {n, k}), Tensor(w_bf16.data(), DType::kBF16, {n, k})}) {
    absl::StatusOr<OwnedTensor> imported = backend.ImportLinearWeight(rows, WeightQuant::kBf16);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->tensor.dtype, DType::kBF16Panel16);
    EXPECT_EQ(imported->tensor.dim(0), n);
    for (int64_t m : {1, 3, 8, 13}) {
      std::vector<float> x = Random(m * k, 43), fp32(m * n), got(m * n), want(m * n);
      ASSERT_TRUE(backend.Linear(F32(x, {m, k}), imported->tensor, F32(bias, {n}),
                                 Activation::kBloomGelu, F32(got, {m, n})).ok());
      GemmArgs args;
      args.x = x.data();
      args.w = imported->tensor.data;
      args.w_dtype = DType::kBF16Panel16;
      args.bias = bias.data();
      args.out = want.data();
      args.m = m;
      args.n = n;
      args.k = k;
      args.activation = Activation::kBloomGelu;
      Bf16PanelGemmNT(args, nullptr, GemmIsa::kPortable);
      EXPECT_EQ(got, want) << DTypeName(rows.dtype) << " m " << m;
      ASSERT_TRUE(backend.Linear(F32(x, {m, k}), rows, F32(bias, {n}), Activation::kBloomGelu,
                                 F32(fp32, {m, n})).ok());
      double rms = 0, max_error = 0;
      for (size_t i = 0; i < fp32.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i]));
        rms += double(fp32[i]) * fp32[i];
        max_error = std::max(max_error, double(std::fabs(got[i] - fp32[i])));
      }
      rms = std::sqrt(rms / fp32.size());
      EXPECT_LT(max_error, 0.01 * rms) << DTypeName(rows.dtype) << " m " << m;
      EXPECT_GT(max_error, 0.0) << "rounding x to bf16 must change something";
    }
  }
  std::vector<float> odd(16 * 3);
  absl::StatusOr<OwnedTensor> refused = backend.ImportLinearWeight(F32(odd, {16, 3}), WeightQuant::kBf16);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("even"), std::string::npos) << refused.status();
}

// Unquantized: on AVX-512 a row-paired copy (weight_pairs.h) that gives the row-major weight's
// bits, at decode and prefill batch sizes and with an odd last row; elsewhere, or with rows
// that are not whole 8-element chunks, the zero-copy view.
TEST(CpuBackendTest, UnquantizedLinearWeightIsRowPairedOnAvx512WithTheSameBits) {
  CpuBackend backend(2);
  const bool packs = BestGemmIsa() == GemmIsa::kAvx512;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t n = 29, k = 64;
    std::vector<float> w = Random(n * k, 24);
    std::vector<uint16_t> half(w.size());
    Tensor rows = F32(w, {n, k});
    if (dtype == DType::kBF16) {
      ConvertFromF32(w.data(), half.data(), dtype, w.size());
      rows = Tensor(half.data(), dtype, {n, k});
    }
    absl::StatusOr<OwnedTensor> imported = backend.ImportLinearWeight(rows, WeightQuant::kNone);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->tensor.dtype, packs ? PairsOf(dtype) : dtype);
    EXPECT_EQ(imported->tensor.data == rows.data, !packs);
    EXPECT_EQ(imported->tensor.bytes(), rows.bytes());
    for (int64_t m : {1, 3, 8, 13}) {
      std::vector<float> x = Random(m * k, 25), bias = Random(n, 26), want(m * n), got(m * n);
      ASSERT_TRUE(backend.Linear(F32(x, {m, k}), rows, F32(bias, {n}), Activation::kBloomGelu,
                                 F32(want, {m, n})).ok());
      ASSERT_TRUE(backend.Linear(F32(x, {m, k}), imported->tensor, F32(bias, {n}),
                                 Activation::kBloomGelu, F32(got, {m, n})).ok());
      EXPECT_EQ(got, want) << DTypeName(dtype) << " m " << m;
    }
  }
  std::vector<float> odd(4 * 20);
  absl::StatusOr<OwnedTensor> view = backend.ImportLinearWeight(F32(odd, {4, 20}), WeightQuant::kNone);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tensor.data, odd.data());
  EXPECT_EQ(view->tensor.dtype, DType::kF32);
}

// A copy made at import reports the host rows it has read in slices of ~32 MiB (so that the
// caller can release them early), in order, covering every row once, each slice an even count
// of rows (whole panels of 16 for int8, int4 and bf16 panels); the copy is the same with or without the
// callback. 8500 rows (row pairs and a last odd row's slice) and 8512 (panels where int8 is
// panel-packed).
TEST(CpuBackendTest, CopiedImportsReportTheirHostRowsInSlices) {
  CpuBackend backend(2);
  const int64_t k = 1024;  // 34 MB of f32: two slices
  for (const int64_t n : {8500, 8512}) {
    for (WeightQuant quant : {WeightQuant::kNone, WeightQuant::kInt8, WeightQuant::kInt4, WeightQuant::kBf16}) {
      std::vector<float> w = Random(n * k, 27);
      std::vector<std::pair<int64_t, int64_t>> slices;
      absl::StatusOr<OwnedTensor> sliced = backend.ImportLinearWeight(
          F32(w, {n, k}), quant, [&](int64_t b, int64_t e) { slices.emplace_back(b, e); });
      ASSERT_TRUE(sliced.ok()) << sliced.status();
      absl::StatusOr<OwnedTensor> whole = backend.ImportLinearWeight(F32(w, {n, k}), quant);
      ASSERT_TRUE(whole.ok());
      if (sliced->tensor.data == w.data()) {  // a zero-copy view (no AVX-512): nothing was copied
        EXPECT_TRUE(slices.empty());
        continue;
      }
      ASSERT_GE(slices.size(), 2u) << WeightQuantName(quant);
      int64_t next = 0;
      for (const auto& [b, e] : slices) {
        EXPECT_EQ(b, next);
        EXPECT_GT(e, b);
        if (e != n) {
          const DType dtype = sliced->tensor.dtype;
          const bool panel = dtype == DType::kQ8G32Panel16 || dtype == DType::kQ4G32Panel16 ||
                             dtype == DType::kBF16Panel16;
          EXPECT_EQ((e - b) % (panel ? 16 : 2), 0);
        }
        next = e;
      }
      EXPECT_EQ(next, n);
      ASSERT_EQ(sliced->tensor.bytes(), whole->tensor.bytes());
      EXPECT_EQ(std::memcmp(sliced->tensor.data, whole->tensor.data, whole->tensor.bytes()), 0)
          << WeightQuantName(quant);
    }
  }
}

TEST(CpuBackendTest, QuantizeRefusesRowsThatAreNotWholeBlocks) {
  CpuBackend backend(1);
  std::vector<float> w(4 * 40);
  absl::StatusOr<OwnedTensor> packed = backend.ImportLinearWeight(F32(w, {4, 40}), WeightQuant::kInt8);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(packed.status().message().find("int8"), std::string::npos) << packed.status();
  EXPECT_NE(packed.status().message().find("[4, 40]"), std::string::npos) << packed.status();
}

TEST(CpuBackendTest, AddBiasResidualOrder) {
  CpuBackend backend(1);
  std::vector<float> x = {1, 2, 3, 4}, bias = {10, 20}, residual = {100, 200, 300, 400};
  ASSERT_TRUE(backend.AddBiasResidual(F32(x, {2, 2}), F32(bias, {2}), F32(residual, {2, 2})).ok());
  EXPECT_EQ(x, (std::vector<float>{111, 222, 313, 424}));
}

TEST(CpuBackendTest, GatherSoftmaxArgmax) {
  CpuBackend backend(2);
  std::vector<float> x = {1, 3, 3, 0, -1, 2, 5, 5, 5};
  std::vector<int32_t> rows = {2, 0};
  std::vector<float> gathered(6);
  ASSERT_TRUE(backend.GatherRows(F32(x, {3, 3}), I32(rows, {2}), F32(gathered, {2, 3})).ok());
  EXPECT_EQ(gathered, (std::vector<float>{5, 5, 5, 1, 3, 3}));
  std::vector<int32_t> arg(3);
  ASSERT_TRUE(backend.Argmax(F32(x, {3, 3}), I32(arg, {3})).ok());
  EXPECT_EQ(arg, (std::vector<int32_t>{1, 2, 0}));  // ties -> lowest index
  std::vector<float> p(9);
  ASSERT_TRUE(backend.Softmax(F32(x, {3, 3}), F32(p, {3, 3})).ok());
  for (int r = 0; r < 3; ++r) {
    double denom = 0;
    for (int i = 0; i < 3; ++i) denom += std::exp(double(x[r * 3 + i]));
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[r * 3 + i], std::exp(double(x[r * 3 + i])) / denom, 1e-6);
  }
}

}  // namespace
}  // namespace blossom
