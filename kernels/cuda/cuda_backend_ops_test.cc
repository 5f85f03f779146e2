// Parity of CudaBackend's per-token ops with the CPU reference backend, on fresh random inputs of
// realistic and odd sizes, in F32, F16 and BF16: Embedding, LayerNorm, Linear (bias, GELU
// epilogue or not, fp32 output, misaligned views, the skinny GEMM of decode-sized steps),
// AddBiasResidual, GatherRows, Softmax, Argmax; CopyColumns in F32 (the logits assembly).
//
// Tolerances, and the "BLOSSOM_OP_ERROR {...}" lines each binary prints at the end:
// cuda_backend_test_util.h. Without a visible GPU every test reports SKIPPED with the reason.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_backend_test_util.h"

namespace blossom::cuda_backend_testing {
namespace {

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

// The register-resident LayerNorm (CudaBackend::Options::register_layernorm) keeps every sum in
// the three-pass kernel's order: the same bits, output and stored residual, on rows it serves
// (up to 2048 vectors) and rows it leaves to the other kernels (20480 and 40960, 1023 unaligned).
TEST_F(CudaBackendTest, LayerNormInRegistersGivesTheThreePassKernelsBits) {
  struct Run {
    std::vector<float> out, residual;
  };
  auto run = [&](DType dt, int64_t hidden, int64_t T, bool with_residual) {
    const std::vector<float> x = RoundTo(Random(T * hidden, 31, 3.0f), dt);
    const std::vector<float> res = RoundTo(Random(T * hidden, 32), dt);
    const std::vector<float> gamma = RoundTo(Random(hidden, 33), dt), beta = RoundTo(Random(hidden, 34), dt);
    Tensor gres = Upload(res, dt, {T, hidden});
    Tensor out = Empty(dt, {T, hidden});
    EXPECT_TRUE(gpu_->LayerNorm(Upload(x, dt, {T, hidden}), Upload(gamma, dt, {hidden}), Upload(beta, dt, {hidden}),
                                1e-5f, with_residual ? gres : Tensor(), out)
                    .ok());
    return Run{Download(out), Download(gres)};
  };
  for (DType dt : kFloatTypes) {
    for (int64_t hidden : {64, 1000, 1023, 4096, 14336, 20480, 40960}) {
      for (int64_t T : {1, 7, 129}) {
        for (bool with_residual : {false, true}) {
          ASSERT_NO_FATAL_FAILURE(UseBackend(CudaBackend::Options()));
          const Run three_pass = run(dt, hidden, T, with_residual);
          CudaBackend::Options options;
          options.register_layernorm = true;
          ASSERT_NO_FATAL_FAILURE(UseBackend(options));
          const Run in_registers = run(dt, hidden, T, with_residual);
          const bool finite = std::all_of(three_pass.out.begin(), three_pass.out.end(),
                                          [](float v) { return std::isfinite(v); });
          EXPECT_TRUE(finite) << "hidden " << hidden;
          EXPECT_TRUE(three_pass.out == in_registers.out)
              << DTypeName(dt) << " hidden " << hidden << " T " << T << " residual " << with_residual;
          EXPECT_TRUE(three_pass.residual == in_registers.residual)
              << DTypeName(dt) << " hidden " << hidden << " T " << T << " residual " << with_residual;
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
  options.skinny_gemm = false;  // M = 1 would take the skinny GEMM, which has its own test
  ASSERT_NO_FATAL_FAILURE(UseBackend(options));
  for (DType dt : kFloatTypes) EXPECT_FALSE(gpu_->gelu_epilogue_in_use(dt)) << DTypeName(dt);
  const LinearCase cases[] = {{1, 1024, 4096}, {129, 1024, 3072}, {7, 65, 67}};
  for (DType dt : kFloatTypes) {
    for (const LinearCase& c : cases) {
      ExpectLinearMatchesCpu(c, dt, /*with_bias=*/true, Activation::kBloomGelu, 41, "Linear+gelu(separate)");
    }
  }
}

TEST_F(CudaBackendTest, LinearHalfInputsWithF32OutputLikeTheLmHead) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const int64_t m : {7, 33}) {  // the skinny GEMM (M <= 8) and cuBLASLt
      ExpectF32OutLinearMatchesCpu({m, 256, 5000}, dt, 41, "Linear.f32out");
    }
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

// Decode-sized linears (M <= 8) run the skinny GEMM (skinny_gemm.cu) by default when GEMM timing
// is off, as here: every row-count template (1, 2, 4, 8 and the rows between), K a multiple of the
// 16-byte vector but not of a warp's stride, N not a multiple of a block's 16 columns, BLOOM-7b1's
// shapes, and an fp32 output like the LM head. Then the same on the split-K variant
// (Options::skinny_split_k), with the choice made by timing against cuBLASLt (both variants
// candidates), and with the skinny GEMM off.
TEST_F(CudaBackendTest, SkinnyGemmMatchesCpu) {
  const LinearCase cases[] = {{1, 4096, 4096}, {2, 1000, 999}, {3, 72, 67},      {4, 16384, 64},
                              {5, 8, 33},      {6, 4096, 17},  {8, 1024, 12288}, {7, 4096, 1}};
  auto run_all = [&](const char* op) {
    for (DType dt : kFloatTypes) {
      for (const LinearCase& c : cases) {
        for (int variant = 0; variant < 3; ++variant) {  // no bias; bias; bias + gelu
          ExpectLinearMatchesCpu(c, dt, /*with_bias=*/variant >= 1,
                                 variant == 2 ? Activation::kBloomGelu : Activation::kNone, 71, op);
        }
      }
    }
  };
  run_all("Linear.skinny");
  for (DType dt : {DType::kBF16, DType::kF16}) {
    ExpectF32OutLinearMatchesCpu({3, 512, 2500}, dt, 72, "Linear.skinny.f32out");
  }
  {
    CudaBackend::Options options;
    options.skinny_split_k = true;  // untimed: always the split-K variant
    ASSERT_NO_FATAL_FAILURE(UseBackend(options));
    run_all("Linear.skinny_split_k");
    for (DType dt : {DType::kBF16, DType::kF16}) {
      ExpectF32OutLinearMatchesCpu({3, 512, 2500}, dt, 73, "Linear.skinny_split_k.f32out");
    }
  }
  for (const bool timed : {true, false}) {
    CudaBackend::Options options;
    options.time_gemm_candidates = timed;
    options.skinny_gemm = timed;  // timed: whichever measured faster; untimed and off: cuBLASLt
    options.skinny_split_k = timed;
    ASSERT_NO_FATAL_FAILURE(UseBackend(options));
    run_all(timed ? "Linear.timed_choice" : "Linear.skinny_off");
  }
}

// The tensor-core skinny GEMM (Options::skinny_mma, untimed: it runs wherever it applies): f16
// and bf16, every row count to 16 (both n-tile templates), K a multiple of the 16-byte vector but
// not of a 32-element chunk or of the 8 warps' share, K shorter than the warps (some warps get no
// chunk), N not a multiple of 16, BLOOM-7b1's sizes (K = 16384 of fc2, N = 12288 of the fused QKV)
// and an fp32 output like the LM head; then timed against the other variants and cuBLASLt. f32 has no mma path: its
// shapes take the CUDA-core kernel, and 9 to 16 rows cuBLASLt.
TEST_F(CudaBackendTest, SkinnyMmaGemmMatchesCpu) {
  const LinearCase cases[] = {{1, 4096, 4096}, {2, 1000, 999}, {3, 72, 67},      {4, 16384, 64},
                              {5, 8, 33},      {8, 4096, 17},  {9, 1024, 12288}, {16, 4096, 1},
                              {12, 16384, 4096}, {16, 24, 100}, {11, 4104, 4097}};
  for (const bool timed : {false, true}) {
    CudaBackend::Options options;
    options.skinny_mma = true;
    options.skinny_split_k = timed;
    options.time_gemm_candidates = timed;
    ASSERT_NO_FATAL_FAILURE(UseBackend(options));
    const char* op = timed ? "Linear.skinny_mma_timed" : "Linear.skinny_mma";
    for (DType dt : kFloatTypes) {
      for (const LinearCase& c : cases) {
        for (int variant = 0; variant < 3; ++variant) {  // no bias; bias; bias + gelu
          ExpectLinearMatchesCpu(c, dt, /*with_bias=*/variant >= 1,
                                 variant == 2 ? Activation::kBloomGelu : Activation::kNone, 74, op);
        }
      }
    }
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (const int64_t m : {3, 14}) ExpectF32OutLinearMatchesCpu({m, 512, 2500}, dt, 75, op);
    }
  }
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

// The vocabulary-parallel logits assembly: unequal slices (250880 over 3 ranks) placed side by
// side, exactly as the CPU backend (Backend's host default) places them.
TEST_F(CudaBackendTest, CopyColumnsMatchesCpu) {
  const int64_t rows = 5, vocab = 250880, world = 3;
  std::vector<float> ref(rows * vocab, -1.0f);
  Tensor out = Upload(ref, DType::kF32, {rows, vocab});
  for (int64_t r = 0, begin = 0; r < world; ++r) {
    const int64_t width = vocab / world + (r < vocab % world ? 1 : 0);
    std::vector<float> slice = Random(rows * width, 95 + r);
    ASSERT_TRUE(cpu_.CopyColumns(HostF32(slice, {rows, width}), HostF32(ref, {rows, vocab}), begin).ok());
    ASSERT_TRUE(gpu_->CopyColumns(Upload(slice, DType::kF32, {rows, width}), out, begin).ok());
    begin += width;
  }
  EXPECT_TRUE(Near("CopyColumns/f32", Download(out), ref, 0.0));
  EXPECT_EQ(gpu_->CopyColumns(Empty(DType::kF32, {rows, 8}), out, vocab - 4).code(),
            absl::StatusCode::kInvalidArgument);
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
}  // namespace blossom::cuda_backend_testing
