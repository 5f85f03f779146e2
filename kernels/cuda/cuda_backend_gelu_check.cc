// CudaBackend: whether cuBLASLt's GELU epilogue computes BLOOM's GELU closely enough to fuse it
// into the linears (checked once per activation dtype at start-up).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

float HostBloomGelu(float x) {
  return x * 0.5f * (1.0f + std::tanh(0.79788456f * x * (1.0f + 0.044715f * x * x)));
}

}  // namespace

absl::Status CudaBackend::CalibrateGeluEpilogue() {
  for (bool& ok : impl_->gelu_epilogue) ok = false;
  if (!impl_->options.allow_gelu_epilogue) return absl::OkStatus();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    BLOSSOM_ASSIGN_OR_RETURN(impl_->gelu_epilogue[GeluSlot(dtype)], GeluEpilogueMatchesBloom(dtype));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaBackend::GeluEpilogueMatchesBloom(DType dtype) {
  // At a decode-sized M (cuBLASLt picks kernels, and so epilogue code, by shape): row i of x is
  // (1, c_i, 0, ...) and row j of w is (v_j, 0.5, 0, ...), so out[i, j] = gelu(v_j + 0.5 c_i + b_j)
  // samples the epilogue's GELU on about [-6.5, 6.5]. Inputs are rounded to `dtype` first and
  // every product is exact, so the host reference sees the same pre-activations.
  constexpr int64_t kM = 128, kN = 256, kK = 64;
  std::vector<float> x(kM * kK, 0.0f), w(kN * kK, 0.0f), bias(kN, 0.0f);
  for (int64_t i = 0; i < kM; ++i) {
    x[i * kK] = 1.0f;
    x[i * kK + 1] = 0.25f * static_cast<float>(i % 8) - 1.0f;
  }
  for (int64_t j = 0; j < kN; ++j) {
    w[j * kK] = -6.0f + 12.0f * static_cast<float>(j) / (kN - 1);
    w[j * kK + 1] = 0.5f;
    bias[j] = 0.125f * static_cast<float>(j % 3) - 0.125f;
  }
  std::vector<uint16_t> half(std::max(x.size(), w.size()));
  auto round_to_dtype = [&](std::vector<float>& v) {
    if (dtype == DType::kF32) return;
    ConvertFromF32(v.data(), half.data(), dtype, v.size());
    ConvertToF32(half.data(), dtype, v.data(), v.size());
  };
  round_to_dtype(x);
  round_to_dtype(w);
  round_to_dtype(bias);
  auto upload = [&](const std::vector<float>& v, const Tensor& dst) -> absl::Status {
    if (dtype == DType::kF32) return CopyToDevice(v.data(), dst);
    ConvertFromF32(v.data(), half.data(), dtype, v.size());
    return CopyToDevice(half.data(), dst);
  };
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor dx, AllocateTensor(dtype, {kM, kK}));
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor dw, AllocateTensor(dtype, {kN, kK}));
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor db, AllocateTensor(dtype, {kN}));
  BLOSSOM_RETURN_IF_ERROR(upload(x, dx.tensor));
  BLOSSOM_RETURN_IF_ERROR(upload(w, dw.tensor));
  BLOSSOM_RETURN_IF_ERROR(upload(bias, db.tensor));
  BLOSSOM_ASSIGN_OR_RETURN(OwnedTensor dout, AllocateTensor(dtype, {kM, kN}));
  bool done = false;
  BLOSSOM_RETURN_IF_ERROR(impl_->gemm->Matmul(dx.tensor, dw.tensor, db.tensor, /*gelu=*/true, dout.tensor, &done));
  if (!done) return false;
  std::vector<float> out(kM * kN);
  if (dtype == DType::kF32) {
    BLOSSOM_RETURN_IF_ERROR(CopyToHost(dout.tensor, out.data()));
  } else {
    std::vector<uint16_t> raw(out.size());
    BLOSSOM_RETURN_IF_ERROR(CopyToHost(dout.tensor, raw.data()));
    ConvertToF32(raw.data(), dtype, out.data(), out.size());
  }
  // One unit of the output's last place, relative: an erf GELU or a coarse tanh approximation
  // differs from BLOOM's by > 1e-4 somewhere on the range, which fp32 resolves; in 16 bits only
  // differences above the format's own rounding matter.
  const float rel = dtype == DType::kF32 ? 2e-6f : (dtype == DType::kF16 ? 1.0f / 1024 : 1.0f / 128);
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      const float pre = w[j * kK] * x[i * kK] + w[j * kK + 1] * x[i * kK + 1] + bias[j];
      const float ref = HostBloomGelu(pre);
      const float got = out[i * kN + j];
      if (!(std::fabs(got - ref) <= rel * (1.0f + std::fabs(ref)))) return false;
    }
  }
  return true;
}

}  // namespace blossom
