// CudaBackend::Linear: cuBLASLt with its epilogues for every shape, and for decode-sized steps
// (M <= cuda::kSkinnyGemmMaxRows, or kSkinnyMmaMaxRows with the tensor-core variant) the skinny
// GEMM (skinny_gemm.cu) where it is faster.
//
// Which runs a decode-sized shape: with Options::time_gemm_candidates (the server's warm-up runs
// every GEMM row bucket before serving), the first call of each (M bucket, N, K, dtypes,
// epilogue) times cuBLASLt and the skinny GEMM variants the options allow (whole K; split K with
// Options::skinny_split_k; tensor cores with Options::skinny_mma) on the stream (after cuBLASLt
// has timed its own candidates) and keeps the fastest for good, logging the times once; while a
// step graph is being captured, or without timing, a skinny GEMM runs (it was written for
// exactly these shapes): the tensor-core one where it applies and is allowed, else split K where
// allowed, else whole K.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <string>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/gemm_plan_policy.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/lt_gemm.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

absl::Status Launched(const char* what, cudaError_t err) {
  return err == cudaSuccess ? absl::OkStatus() : CudaError(what, err);
}

constexpr int kTimedRuns = 3;

// A candidate of ChooseDecodeLinear as its `[cuda linear]` log line names it.
const char* CandidateName(int candidate) {
  switch (candidate) {
    case static_cast<int>(cuda::SkinnyGemmVariant::kWholeK):
      return "skinny GEMM";
    case static_cast<int>(cuda::SkinnyGemmVariant::kSplitK):
      return "skinny split-K";
    case static_cast<int>(cuda::SkinnyGemmVariant::kMma):
      return "skinny mma";
    default:
      return "cuBLASLt";
  }
}

}  // namespace

absl::Status CudaBackend::Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation,
                                 Tensor out) {
  const int64_t k = x.dim(-1), n = weight.dim(0);
  const int64_t m = k > 0 ? x.numel() / k : 0;
  if (!(IsFloatTensor(x) && IsFloatTensor(weight) && IsFloatTensor(out) && x.dtype == weight.dtype &&
        weight.rank == 2 && weight.dim(1) == k && out.numel() == m * n &&
        (out.dtype == x.dtype || out.dtype == DType::kF32) &&
        (bias.empty() || (IsFloat(bias.dtype) && bias.numel() == n)))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: Linear: bad shapes or dtypes: x ", x.ShapeString(), " ", DTypeName(x.dtype), ", weight ",
        weight.ShapeString(), " ", DTypeName(weight.dtype), ", out ", out.ShapeString(), " ", DTypeName(out.dtype)));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  const bool gelu = activation == Activation::kBloomGelu;
  const SkinnyVariants variants = SkinnyVariantsFor(x, weight);
  if (!variants.empty()) {
    BLOSSOM_ASSIGN_OR_RETURN(const int choice, ChooseDecodeLinear(x, weight, bias, gelu, out, variants));
    if (choice != kUseCublasLt) return LinearSkinny(x, weight, bias, gelu, out, choice);
  }
  return LinearLt(x, weight, bias, gelu, out);
}

CudaBackend::SkinnyVariants CudaBackend::SkinnyVariantsFor(const Tensor& x, const Tensor& weight) const {
  SkinnyVariants variants;
  const Options& o = impl_->options;
  if (!o.skinny_gemm) return variants;
  const int64_t k = x.dim(-1), n = weight.dim(0), m = x.numel() / k;
  auto add_if = [&](bool allowed, cuda::SkinnyGemmVariant v) {
    if (allowed && cuda::SkinnyGemmSupports(x.data, weight.data, Elem(x.dtype), m, n, k, v)) {
      variants.push_back(static_cast<int>(v));
    }
  };
  add_if(o.skinny_mma, cuda::SkinnyGemmVariant::kMma);
  add_if(o.skinny_split_k, cuda::SkinnyGemmVariant::kSplitK);
  add_if(true, cuda::SkinnyGemmVariant::kWholeK);
  return variants;
}

absl::Status CudaBackend::LinearSkinny(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu,
                                       Tensor out, int variant) {
  const int64_t k = x.dim(-1), n = weight.dim(0), m = x.numel() / k;
  return Launched("LaunchSkinnyGemm",
                  cuda::LaunchSkinnyGemm(x.data, weight.data, Elem(x.dtype), bias.empty() ? nullptr : bias.data,
                                         Elem(bias.empty() ? out.dtype : bias.dtype), gelu, m, n, k, out.data,
                                         Elem(out.dtype), impl_->stream,
                                         static_cast<cuda::SkinnyGemmVariant>(variant),
                                         impl_->options.programmatic_launch));
}

absl::Status CudaBackend::LinearLt(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu, Tensor out) {
  const int64_t k = x.dim(-1), n = weight.dim(0), m = x.numel() / k;
  // cuBLASLt applies the bias only when it shares the output dtype and is 16-byte aligned
  // (cuBLASLt has no alignment preference for it), and the GELU only where the start-up check
  // passed for this dtype. Plans are tried from the most fused to the plainest, so a heuristic
  // miss on the fused epilogue costs one extra elementwise pass, not the CUDA-core GEMM.
  const bool bias_fusable = !bias.empty() && bias.dtype == out.dtype && LtGemm::AlignmentOf(bias.data) >= 16;
  const bool gelu_fusable = gelu && impl_->gelu_epilogue[GeluSlot(out.dtype)] && (bias.empty() || bias_fusable);
  struct Attempt {
    bool with_bias, with_gelu;
  };
  std::vector<Attempt> attempts;
  if (gelu_fusable) attempts.push_back({!bias.empty(), true});
  if (bias_fusable) attempts.push_back({true, false});
  attempts.push_back({false, false});
  for (const Attempt& attempt : attempts) {
    bool done = false;
    BLOSSOM_RETURN_IF_ERROR(
        impl_->gemm->Matmul(x, weight, attempt.with_bias ? bias : Tensor(), attempt.with_gelu, out, &done));
    if (!done) continue;
    const bool add_bias = !bias.empty() && !attempt.with_bias;
    const bool add_gelu = gelu && !attempt.with_gelu;
    if (add_bias || add_gelu) {
      BLOSSOM_RETURN_IF_ERROR(Launched(
          "LaunchBiasActivation",
          cuda::LaunchBiasActivation(out.data, Elem(out.dtype), add_bias ? bias.data : nullptr,
                                     Elem(add_bias ? bias.dtype : out.dtype), add_gelu, m, n, impl_->stream)));
    }
    return absl::OkStatus();
  }
  return Launched("LaunchFallbackGemm",
                  cuda::LaunchFallbackGemm(x.data, Elem(x.dtype), weight.data, Elem(weight.dtype), bias.data,
                                           Elem(bias.dtype), gelu, m, n, k, out.data, Elem(out.dtype),
                                           impl_->stream));
}

absl::StatusOr<int> CudaBackend::ChooseDecodeLinear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                    bool gelu, Tensor out, const SkinnyVariants& variants) {
  const int64_t k = x.dim(-1), n = weight.dim(0), m = x.numel() / k;
  const Impl::LinearShape key = {GemmRowBucket(m),
                                 n,
                                 k,
                                 static_cast<int64_t>(x.dtype),
                                 static_cast<int64_t>(out.dtype),
                                 bias.empty() ? -1 : static_cast<int64_t>(bias.dtype),
                                 gelu ? 1 : 0};
  // A bucket's choice serves all its row counts: the variants' row limits (8, 16) are bucket
  // bounds, so every row count of a bucket qualifies for the same variants.
  if (auto it = impl_->skinny_choice.find(key); it != impl_->skinny_choice.end()) return it->second;
  if (!impl_->options.time_gemm_candidates || impl_->capturing.load()) return variants.front();

  // Every candidate once untimed (cuBLASLt makes its plan and times its candidates here), then
  // each kTimedRuns times back to back between events. Every run writes the same `out`. The
  // skinny variants in a fixed order (whole K, split K, tensor cores), so that a tie goes to the
  // later one as below.
  std::vector<int> candidates = {kUseCublasLt};
  for (cuda::SkinnyGemmVariant v :
       {cuda::SkinnyGemmVariant::kWholeK, cuda::SkinnyGemmVariant::kSplitK, cuda::SkinnyGemmVariant::kMma}) {
    const int id = static_cast<int>(v);
    if (std::find(variants.begin(), variants.end(), id) != variants.end()) candidates.push_back(id);
  }
  auto run = [&](int candidate) {
    return candidate == kUseCublasLt ? LinearLt(x, weight, bias, gelu, out)
                                     : LinearSkinny(x, weight, bias, gelu, out, candidate);
  };
  for (int candidate : candidates) BLOSSOM_RETURN_IF_ERROR(run(candidate));
  cudaEvent_t* ev = impl_->linear_timing;
  for (size_t i = 0; i <= candidates.size(); ++i) {
    if (ev[i] == nullptr) BLOSSOM_RETURN_IF_ERROR(Launched("cudaEventCreate", cudaEventCreate(&ev[i])));
  }
  BLOSSOM_RETURN_IF_ERROR(Launched("cudaEventRecord", cudaEventRecord(ev[0], impl_->stream)));
  for (size_t c = 0; c < candidates.size(); ++c) {
    for (int r = 0; r < kTimedRuns; ++r) BLOSSOM_RETURN_IF_ERROR(run(candidates[c]));
    BLOSSOM_RETURN_IF_ERROR(Launched("cudaEventRecord", cudaEventRecord(ev[c + 1], impl_->stream)));
  }
  BLOSSOM_RETURN_IF_ERROR(Launched("cudaEventSynchronize", cudaEventSynchronize(ev[candidates.size()])));
  std::vector<float> ms(candidates.size());
  size_t best = 0;
  for (size_t c = 0; c < candidates.size(); ++c) {
    BLOSSOM_RETURN_IF_ERROR(
        Launched("cudaEventElapsedTime", cudaEventElapsedTime(&ms[c], ev[c], ev[c + 1])));
    ms[c] /= kTimedRuns;
    // Ties go to the later candidate: the skinny GEMM over cuBLASLt, as before split K existed.
    if (ms[c] <= ms[best]) best = c;
  }
  impl_->skinny_choice[key] = candidates[best];
  // One line per decode-sized shape at warm-up: the measured choice, visible in the server's log.
  std::string times;
  for (size_t c = 0; c < candidates.size(); ++c) {
    absl::StrAppendFormat(&times, "%s%s %.4f ms", c == 0 ? "" : ", ", CandidateName(candidates[c]), ms[c]);
  }
  std::fprintf(stderr, "[cuda linear] M<=%lld N=%lld K=%lld %s%s%s: %s -> %s\n", static_cast<long long>(key[0]),
               static_cast<long long>(n), static_cast<long long>(k), DTypeName(x.dtype),
               out.dtype != x.dtype ? "->f32" : "", gelu ? " +gelu" : "", times.c_str(),
               CandidateName(candidates[best]));
  return candidates[best];
}

}  // namespace blossom
