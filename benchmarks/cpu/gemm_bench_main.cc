// gemm-bench: the CPU GEMM (kernels/cpu/gemm.h; quant_gemm.h for int8 / int4; bf16_panel_gemm.h
// for bf16-panel16, the --quantize bf16 GEMM) alone, on the
// linear shapes of a BLOOM model, as one JSON line per (dtype, M, shape): median milliseconds,
// weight GB/s and GFLOP/s.
//
//   gemm-bench [--hidden 1024] [--vocab 250880] [--ms 1,8,128]
//              [--dtypes f32,bf16,f16,f32-pairs,bf16-pairs,f16-pairs,int8,int8-panel16,int4,
//                        int4-panel16,bf16-panel16]
//              [--threads 2] [--reps 7] [--isa auto|portable|avx2|avx512]
//
// Kernel-level numbers, without the rest of a step; cpu-step-bench measures whole steps.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/bf16_panel_gemm.h"
#include "kernels/cpu/bf16_panel_tile.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/weight_pairs.h"
#include "kernels/weight_quant.h"
#include "tools/cli/dashed_flags.h"

ABSL_FLAG(int64_t, hidden, 1024, "Hidden size (bloom-560m: 1024).");
ABSL_FLAG(int64_t, vocab, 250880, "Vocabulary rows of the LM head (0 = skip it).");
ABSL_FLAG(std::vector<std::string>, ms, std::vector<std::string>({"1", "8", "128"}),
          "Rows of x (tokens in the step).");
ABSL_FLAG(std::vector<std::string>, dtypes, std::vector<std::string>({"f32", "bf16", "f16"}),
          "Weight dtypes: f32, bf16, f16, their row-paired forms f32-pairs, bf16-pairs, "
          "f16-pairs (as the backend pairs them on AVX-512), int8 / int4 (as --quantize), int8-panel16, "
          "int4-panel16 or bf16-panel16 (as --quantize int8 / int4 / bf16 pack them on AVX512-VNNI "
          "/ AVX512-BF16).");
ABSL_FLAG(int32_t, threads, 2, "Threads.");
ABSL_FLAG(int32_t, reps, 7, "Timed repetitions (the median is reported).");
ABSL_FLAG(std::string, isa, "auto", "Micro-kernel path: auto, portable, avx2 or avx512.");

namespace blossom {
namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

int Run() {
  const int64_t h = absl::GetFlag(FLAGS_hidden);
  std::vector<Shape> shapes = {{"qkv", 3 * h, h}, {"dense", h, h}, {"fc1", 4 * h, h},
                               {"fc2", h, 4 * h}};
  if (absl::GetFlag(FLAGS_vocab) > 0) shapes.push_back({"lm_head", absl::GetFlag(FLAGS_vocab), h});
  const std::string isa_name = absl::GetFlag(FLAGS_isa);
  const GemmIsa isa = isa_name == "portable" ? GemmIsa::kPortable
                      : isa_name == "avx2"   ? GemmIsa::kAvx2
                      : isa_name == "avx512" ? GemmIsa::kAvx512
                                             : GemmIsa::kAuto;
  if (!GemmIsaSupported(isa)) {
    std::cerr << "gemm-bench: this CPU cannot run --isa " << isa_name << std::endl;
    return 2;
  }
  ThreadPool pool(absl::GetFlag(FLAGS_threads));
  for (const std::string& dtype_name : absl::GetFlag(FLAGS_dtypes)) {
    // "int8-panel16": int8 in the panel layout the CPU backend uses on AVX512-VNNI without AMX.
    const bool panel16 = dtype_name == "int8-panel16" || dtype_name == "int4-panel16";
    // "bf16-panel16": the --quantize bf16 layout (bf16 x rows, vdpbf16ps).
    const bool bf16_panels = dtype_name == "bf16-panel16";
    absl::StatusOr<WeightQuant> quant =
        ParseWeightQuant(panel16 ? dtype_name.substr(0, 4) : dtype_name);
    // (bf16 names the checkpoint dtype here, not --quantize bf16: that is bf16-panel16.)
    const bool quantized = quant.ok() && (*quant == WeightQuant::kInt8 || *quant == WeightQuant::kInt4);
    // "<float dtype>-pairs": row-paired as the CPU backend pairs Linear weights on AVX-512.
    const bool pairs = absl::EndsWith(dtype_name, "-pairs");
    absl::StatusOr<DType> dtype =
        panel16       ? (*quant == WeightQuant::kInt4 ? DType::kQ4G32Panel16 : DType::kQ8G32Panel16)
        : bf16_panels ? DType::kBF16Panel16
        : quantized ? QuantizedDType(*quant)
                    : ParseDType(pairs ? dtype_name.substr(0, dtype_name.size() - 6) : dtype_name);
    if (!dtype.ok()) {
      std::cerr << "gemm-bench: " << dtype.status().message() << std::endl;
      return 2;
    }
    for (const std::string& m_text : absl::GetFlag(FLAGS_ms)) {
      const int64_t m = std::stoll(m_text);
      for (const Shape& s : shapes) {
        if (s.n * m > (int64_t{1} << 28)) continue;  // the LM head is only ever run for few rows
        std::vector<float> x(m * s.k, 0.01f), out(m * s.n), w32(s.n * s.k);
        for (size_t i = 0; i < w32.size(); ++i) w32[i] = 0.02f * static_cast<float>(i % 97) - 1.0f;
        std::vector<char> w(DTypeBytes(*dtype, s.k) * s.n);
        // Paired weights sit 64-byte aligned, as the backend allocates them.
        std::vector<char> aligned_pairs;
        void* w_data = w.data();
        if (bf16_panels) {
          aligned_pairs.resize(Bf16PanelStorageBytes(s.n, s.k) + 64);
          w_data = aligned_pairs.data() + (64 - reinterpret_cast<uintptr_t>(aligned_pairs.data()) % 64);
          absl::Status packed = PackBf16Panels(w32.data(), DType::kF32, s.n, s.k, 0, s.n, w_data);
          if (!packed.ok()) {
            std::cerr << "gemm-bench: " << packed.message() << std::endl;
            return 2;
          }
          w = {};
        } else if (quantized) {
          absl::Status packed = QuantizeWeightRows(w32.data(), DType::kF32, s.n, s.k, *dtype, w.data());
          if (!packed.ok()) {
            std::cerr << "gemm-bench: " << packed.message() << std::endl;
            return 2;
          }
        } else {
          ConvertFromF32(w32.data(), w.data(), *dtype, w32.size());
        }
        if (pairs) {
          aligned_pairs.resize(w.size() + 64);
          w_data = aligned_pairs.data() + (64 - reinterpret_cast<uintptr_t>(aligned_pairs.data()) % 64);
          PackPairRows(w.data(), *dtype, s.n, s.k, 0, s.n, w_data);
          w = {};
        }
        w32 = {};
        GemmArgs a;
        a.x = x.data();
        a.w = w_data;
        a.w_dtype = pairs ? PairsOf(*dtype) : *dtype;
        a.out = out.data();
        a.m = m;
        a.n = s.n;
        a.k = s.k;
        a.activation = std::string(s.name) == "fc1" ? Activation::kBloomGelu : Activation::kNone;
        auto gemm = bf16_panels ? &Bf16PanelGemmNT : quantized ? &QuantGemmNT : &GemmNT;
        gemm(a, &pool, isa);  // warm-up
        std::vector<double> t;
        for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
          const auto b = std::chrono::steady_clock::now();
          gemm(a, &pool, isa);
          t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - b).count());
        }
        std::sort(t.begin(), t.end());
        const double sec = t[t.size() / 2];
        std::cout << absl::StrFormat(
                         "{\"isa\": \"%s\", \"dtype\": \"%s\", \"m\": %d, \"shape\": \"%s\", "
                         "\"n\": %d, \"k\": %d, \"median_ms\": %.3f, \"weight_gbs\": %.2f, "
                         "\"gflops\": %.2f}",
                         GemmIsaName(isa == GemmIsa::kAuto ? BestGemmIsa() : isa), dtype_name, m,
                         s.name, s.n, s.k, sec * 1e3, DTypeBytes(*dtype, s.k) * s.n / sec / 1e9,
                         2.0 * m * s.n * s.k / sec / 1e9)
                  << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  blossom::NormalizeDashedFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  return blossom::Run();
}
