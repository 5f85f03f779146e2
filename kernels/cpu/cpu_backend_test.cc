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
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_amx.h"
#include "kernels/cpu/quant_panel_tile.h"

namespace blossom {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor F32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}
Tensor I32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kI32, shape);
}

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

// ALiBi causal attention over paged KV against a dense reference in double.
struct SeqCase {
  int cached;   // tokens already in the cache before this step
  int num_new;  // tokens computed this step
};

// kv_dtype: the cache's (a bf16 cache rounds K and V when written, so the reference uses rounded
// K and V). pre_round_kv: round the K and V inputs to bf16 values before anything.
void RunAttentionCase(const std::vector<SeqCase>& seqs, int heads, int d, int block_size,
                      uint32_t seed, std::vector<float>* out_for_seq0 = nullptr,
                      DType kv_dtype = DType::kF32, bool pre_round_kv = false) {
  CpuBackend backend(3);
  const int num_seqs = seqs.size();
  int max_ctx = 0;
  for (auto& s : seqs) max_ctx = std::max(max_ctx, s.cached + s.num_new);
  const int max_blocks = (max_ctx + block_size - 1) / block_size;
  const int num_blocks = num_seqs * max_blocks + 3;
  KvCacheSpec spec{2, num_blocks, block_size, heads, d, kv_dtype};
  auto cache = backend.CreateKvCache(spec);
  ASSERT_TRUE(cache.ok());
  // Scatter each sequence over shuffled blocks.
  std::vector<int32_t> all_blocks(num_blocks);
  std::iota(all_blocks.begin(), all_blocks.end(), 0);
  std::shuffle(all_blocks.begin(), all_blocks.end(), std::mt19937(seed));
  std::vector<int32_t> tables(num_seqs * max_blocks, 0);
  for (int s = 0; s < num_seqs; ++s)
    for (int b = 0; b < max_blocks; ++b) tables[s * max_blocks + b] = all_blocks[s * max_blocks + b];
  // Full per-sequence q/k/v for every position.
  std::vector<std::vector<float>> qkv_full(num_seqs);
  std::vector<std::vector<float>> reference_qkv(num_seqs);
  auto round_kv = [&](std::vector<float>& v) {
    for (size_t row = 0; row < v.size() / (3 * d); ++row)
      for (int e = d; e < 3 * d; ++e) v[row * 3 * d + e] = BF16ToFloat(FloatToBF16(v[row * 3 * d + e]));
  };
  for (int s = 0; s < num_seqs; ++s) {
    qkv_full[s] = Random((seqs[s].cached + seqs[s].num_new) * heads * 3 * d, seed * 31 + s);
    if (pre_round_kv) round_kv(qkv_full[s]);
    reference_qkv[s] = qkv_full[s];
    if (kv_dtype == DType::kBF16) round_kv(reference_qkv[s]);
  }
  const int layer = 1;
  auto write_step = [&](bool cached_part, std::vector<float>* q_out,
                        std::vector<int32_t>* query_start, std::vector<int32_t>* ctx_len) {
    std::vector<float> qkv;
    std::vector<int32_t> slots;
    query_start->assign(1, 0);
    ctx_len->clear();
    for (int s = 0; s < num_seqs; ++s) {
      int begin = cached_part ? 0 : seqs[s].cached;
      int end = cached_part ? seqs[s].cached : seqs[s].cached + seqs[s].num_new;
      for (int p = begin; p < end; ++p) {
        qkv.insert(qkv.end(), qkv_full[s].begin() + p * heads * 3 * d,
                   qkv_full[s].begin() + (p + 1) * heads * 3 * d);
        slots.push_back(tables[s * max_blocks + p / block_size] * block_size + p % block_size);
      }
      query_start->push_back(query_start->back() + (end - begin));
      ctx_len->push_back(end);
    }
    const int tokens = slots.size();
    AttentionMetadata md;
    md.num_seqs = num_seqs;
    md.num_tokens = tokens;
    md.max_blocks_per_seq = max_blocks;
    md.query_start = I32(*query_start, {num_seqs + 1});
    md.context_len = I32(*ctx_len, {num_seqs});
    md.block_tables = I32(tables, {num_seqs, max_blocks});
    md.slot_mapping = I32(slots, {tokens});
    q_out->assign(std::max(1, tokens) * heads * d, 0.0f);
    if (tokens == 0) return md;
    EXPECT_TRUE(backend
                    .SplitQkvWriteCache(F32(qkv, {tokens, heads * 3 * d}), md, layer, **cache,
                                        F32(*q_out, {tokens, heads, d}))
                    .ok());
    return md;
  };
  std::vector<float> q;
  std::vector<int32_t> qs, cl;
  write_step(true, &q, &qs, &cl);  // the "earlier steps"
  AttentionMetadata md = write_step(false, &q, &qs, &cl);
  std::vector<float> slopes(heads);
  for (int h = 0; h < heads; ++h) slopes[h] = std::pow(2.0f, -(h + 1) * 8.0f / heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> out(md.num_tokens * heads * d);
  ASSERT_TRUE(backend
                  .Attention(F32(q, {md.num_tokens, heads, d}), md, layer, **cache,
                             F32(slopes, {heads}), scale, F32(out, {md.num_tokens, heads * d}))
                  .ok());
  if (out_for_seq0 != nullptr)
    out_for_seq0->assign(out.begin(), out.begin() + seqs[0].num_new * heads * d);
  // Dense reference.
  int row = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const auto& f = reference_qkv[s];
    for (int i = 0; i < seqs[s].num_new; ++i, ++row) {
      const int pos = seqs[s].cached + i;
      for (int h = 0; h < heads; ++h) {
        std::vector<double> score(pos + 1);
        double mx = -1e300;
        for (int j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int e = 0; e < d; ++e)
            dot += double(f[(pos * heads + h) * 3 * d + e]) * f[(j * heads + h) * 3 * d + d + e];
          score[j] = double(slopes[h]) * j + dot * scale;
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (double& v : score) sum += (v = std::exp(v - mx));
        for (int e = 0; e < d; ++e) {
          double ref = 0;
          for (int j = 0; j <= pos; ++j)
            ref += score[j] / sum * f[(j * heads + h) * 3 * d + 2 * d + e];
          ASSERT_NEAR(out[(row * heads + h) * d + e], ref, 2e-5)
              << "seq " << s << " pos " << pos << " head " << h;
        }
      }
    }
  }
}

TEST(CpuBackendTest, AttentionPrefillOnly) { RunAttentionCase({{0, 7}}, 4, 8, 4, 1); }
TEST(CpuBackendTest, AttentionDecodeOverCachedBlocks) {
  RunAttentionCase({{13, 1}, {1, 1}, {16, 1}}, 3, 16, 4, 2);
}
TEST(CpuBackendTest, AttentionMixedPrefillChunksAndDecode) {
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}, {8, 8}}, 6, 12, 8, 3);
}

TEST(CpuBackendTest, AttentionOfASequenceDoesNotDependOnItsBatch) {
  std::vector<float> alone, batched;
  RunAttentionCase({{9, 4}}, 4, 8, 4, 7, &alone);
  RunAttentionCase({{9, 4}, {3, 9}, {20, 1}}, 4, 8, 4, 7, &batched);
  ASSERT_EQ(alone.size(), batched.size());
  EXPECT_EQ(0, std::memcmp(alone.data(), batched.data(), alone.size() * sizeof(float)));
}

// A bf16 KV cache (--kv-cache-dtype bf16): the same cases against the reference on rounded K and
// V, and bit for bit the fp32 cache's result for K and V inputs that are bf16 values already
// (rounding on write is the only change; attention runs on the rows widened exactly).
TEST(CpuBackendTest, Bf16KvCacheIsTheFp32CacheOnRoundedKeysAndValues) {
  RunAttentionCase({{13, 1}, {1, 1}, {16, 1}}, 3, 16, 4, 2, nullptr, DType::kBF16);
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}, {8, 8}}, 6, 12, 8, 3, nullptr, DType::kBF16);
  std::vector<float> bf16_cache, f32_cache, unrounded;
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}}, 4, 16, 4, 5, &bf16_cache, DType::kBF16);
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}}, 4, 16, 4, 5, &f32_cache, DType::kF32, /*pre_round_kv=*/true);
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}}, 4, 16, 4, 5, &unrounded, DType::kF32);
  ASSERT_EQ(bf16_cache.size(), f32_cache.size());
  EXPECT_EQ(0, std::memcmp(bf16_cache.data(), f32_cache.data(), f32_cache.size() * sizeof(float)));
  EXPECT_NE(bf16_cache, unrounded) << "the bf16 cache must round K and V";
}

TEST(CpuBackendTest, KvCacheDtypesAreF32OrBf16) {
  CpuBackend backend(1);
  EXPECT_TRUE(backend.SupportsKvCacheDtype(DType::kBF16, DType::kF32));
  EXPECT_FALSE(backend.SupportsKvCacheDtype(DType::kF16, DType::kF32));
  auto cache = backend.CreateKvCache(KvCacheSpec{1, 2, 4, 1, 2, DType::kF16});
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("f16"), std::string::npos) << cache.status();
}

TEST(CpuBackendTest, SplitQkvRejectsSlotsOutsideThePool) {
  CpuBackend backend(1);
  auto cache = backend.CreateKvCache(KvCacheSpec{1, 2, 4, 1, 2, DType::kF32});
  ASSERT_TRUE(cache.ok());
  std::vector<float> qkv(6), q(2);
  std::vector<int32_t> slots = {8}, qs = {0, 1}, cl = {1}, tables = {0};
  AttentionMetadata md;
  md.num_seqs = 1;
  md.num_tokens = 1;
  md.max_blocks_per_seq = 1;
  md.query_start = I32(qs, {2});
  md.context_len = I32(cl, {1});
  md.block_tables = I32(tables, {1, 1});
  md.slot_mapping = I32(slots, {1});
  absl::Status s = backend.SplitQkvWriteCache(F32(qkv, {1, 6}), md, 0, **cache, F32(q, {1, 1, 2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("slot 8"), std::string::npos);
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

// ---- Step capture (the twin of CUDA graphs) and the padding slot captured steps use ----

TEST(CpuBackendCaptureTest, CapturedOpsRunOnlyAtReplayAndReadTheInputsOfThatMoment) {
  CpuBackend backend(2);
  ASSERT_TRUE(backend.SupportsCapture());
  std::vector<float> x = {1, 2, 3, 4}, residual = {10, 20, 30, 40}, probs(4, -1.0f);
  std::vector<int32_t> arg(2, -1);
  ASSERT_TRUE(backend.BeginCapture().ok());
  ASSERT_TRUE(backend.AddBiasResidual(F32(x, {2, 2}), Tensor(), F32(residual, {2, 2})).ok());
  ASSERT_TRUE(backend.Softmax(F32(x, {2, 2}), F32(probs, {2, 2})).ok());
  ASSERT_TRUE(backend.Argmax(F32(x, {2, 2}), I32(arg, {2})).ok());
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend.EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  // Nothing ran while capturing.
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(probs, (std::vector<float>(4, -1.0f)));

  for (const std::vector<float>& input :
       {std::vector<float>{1, 2, 3, 4}, std::vector<float>{9, 1, 0, 5}}) {
    x = input;  // new contents at the captured address, as a step uploads its inputs
    ASSERT_TRUE((*graph)->Replay().ok());
    std::vector<float> want_x = input, want_probs(4);
    std::vector<int32_t> want_arg(2);
    ASSERT_TRUE(backend.AddBiasResidual(F32(want_x, {2, 2}), Tensor(), F32(residual, {2, 2})).ok());
    ASSERT_TRUE(backend.Softmax(F32(want_x, {2, 2}), F32(want_probs, {2, 2})).ok());
    ASSERT_TRUE(backend.Argmax(F32(want_x, {2, 2}), I32(want_arg, {2})).ok());
    EXPECT_EQ(x, want_x);
    EXPECT_EQ(0, std::memcmp(probs.data(), want_probs.data(), probs.size() * sizeof(float)));
    EXPECT_EQ(arg, want_arg);
  }
}

TEST(CpuBackendCaptureTest, RefusesCopiesAllocationAndWaitsWhileCapturing) {
  CpuBackend backend(1);
  std::vector<float> host = {1, 2}, dev = {0, 0};
  ASSERT_TRUE(backend.BeginCapture().ok());
  EXPECT_EQ(backend.CopyToDevice(host.data(), F32(dev, {2})).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend.CopyToHost(F32(dev, {2}), host.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend.Allocate(64).status().code(), absl::StatusCode::kFailedPrecondition);
  const absl::Status wait = backend.Synchronize();
  EXPECT_EQ(wait.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wait.message().find("Synchronize inside a step capture"), std::string::npos)
      << wait.message();
  EXPECT_EQ(dev, (std::vector<float>{0, 0}));
  ASSERT_TRUE(backend.EndCapture().ok());
  EXPECT_TRUE(backend.CopyToDevice(host.data(), F32(dev, {2})).ok());
  EXPECT_TRUE(backend.Allocate(64).ok());
  EXPECT_TRUE(backend.Synchronize().ok());
  EXPECT_EQ(dev, host);
}

TEST(CpuBackendCaptureTest, ErrorsOfCapturedOpsSurfaceAtReplay) {
  CpuBackend backend(1);
  std::vector<float> x = {1, 2, 3}, out(3);
  ASSERT_TRUE(backend.BeginCapture().ok());
  // Shapes do not match: accepted while capturing, refused when the op runs.
  ASSERT_TRUE(backend.Softmax(F32(x, {1, 3}), F32(out, {1, 2})).ok());
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend.EndCapture();
  ASSERT_TRUE(graph.ok());
  EXPECT_EQ((*graph)->Replay().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackendCaptureTest, PaddingSlotWritesTheQueryButNoKeyOrValue) {
  CpuBackend backend(1);
  // 1 layer, 2 blocks of 2 tokens, 1 head of dim 2.
  auto cache = backend.CreateKvCache(KvCacheSpec{1, 2, 2, 1, 2, DType::kF32});
  ASSERT_TRUE(cache.ok());
  // Token 0 writes slot 1; token 1 is padding. Then token 2 reads slot 1 and the untouched
  // slot 0 (zeros) back through attention.
  std::vector<float> qkv = {1, 1, 5, 6, 7, 8, /*padding:*/ 2, 2, 50, 60, 70, 80}, q(4, -1.0f);
  std::vector<int32_t> slots = {1, kPaddingSlot}, qs = {0, 1, 2}, cl = {2, 1}, tables = {0, 0};
  AttentionMetadata md;
  md.num_seqs = 2;
  md.num_tokens = 2;
  md.max_query_len = 1;
  md.max_context_len = 2;
  md.max_blocks_per_seq = 1;
  md.query_start = I32(qs, {3});
  md.context_len = I32(cl, {2});
  md.block_tables = I32(tables, {2, 1});
  md.slot_mapping = I32(slots, {2});
  ASSERT_TRUE(backend.SplitQkvWriteCache(F32(qkv, {2, 6}), md, 0, **cache, F32(q, {2, 1, 2})).ok());
  EXPECT_EQ(q, (std::vector<float>{1, 1, 2, 2}));  // both queries written
  // Sequence 0 attends over slot 0 (never written: zeros) and slot 1 (5, 6 / 7, 8); sequence 1,
  // the padding row, over slot 0 only. Had the padding row written slot 0, its values would show.
  std::vector<float> slopes = {0.0f}, out(4);
  ASSERT_TRUE(
      backend.Attention(F32(q, {2, 1, 2}), md, 0, **cache, F32(slopes, {1}), 1.0f, F32(out, {2, 2}))
          .ok());
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
  // softmax([0, 11]) over values [0, 0] and [7, 8].
  const float w = 1.0f / (1.0f + std::exp(-11.0f));
  EXPECT_NEAR(out[0], 7.0f * w, 1e-5f);
  EXPECT_NEAR(out[1], 8.0f * w, 1e-5f);
  // Only -1 marks padding: other negative slots are still refused.
  slots[1] = -2;
  EXPECT_EQ(backend.SplitQkvWriteCache(F32(qkv, {2, 6}), md, 0, **cache, F32(q, {2, 1, 2})).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blossom
