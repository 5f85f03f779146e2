// HardwareProbe for the CUDA backend: the two ceilings the roofline divides by, measured on the
// GPU the sweep runs on.
//
//  - Copy bandwidth: cudaMemcpyAsync device-to-device of `copy_bytes` (default 1 GiB, 20x the
//    H100's 50 MB L2, so the copy streams HBM, not the cache), timed with CUDA events, best of
//    `repetitions` after one warm-up. Reported as bytes read + bytes written (2 x copy_bytes per
//    copy), the convention of CUDA's bandwidthTest and of CpuHardwareProbe, so the two backends'
//    numbers mean the same thing. A decode step reads its weights once and writes almost nothing,
//    so this (read+write) rate is the achievable streaming rate the memory floor should use.
//  - GEMM rate: one cuBLASLt matmul of gemm_m x gemm_n x gemm_k (default 8192^3) with operands
//    and output in the weights' dtype (BF16/F16; F32 as F32) and CUBLAS_COMPUTE_32F (fp32
//    accumulation, never TF32: the numerics CudaBackend::Linear uses), laid out as Linear does
//    (out = x w^T), best of `repetitions` after `warmup` untimed runs. Operands are filled with
//    random values: tensor cores run faster on zeros than on real data.
//
// Best-of (not median) matches CpuHardwareProbe: a ceiling is the best the device was seen to do.
//
// Buffers live only inside each Measure call (freed before it returns), so the probe can run
// after the model is loaded and before the KV cache is sized without holding memory.
//
// Thread-safety: one caller at a time. Each Measure call makes `device` current on the calling
// thread (cudaSetDevice) and runs on a stream of its own.
#ifndef BLOSSOM_BENCHMARKS_GPU_CUDA_HARDWARE_PROBE_H_
#define BLOSSOM_BENCHMARKS_GPU_CUDA_HARDWARE_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "benchmarks/hardware_probe.h"
#include "kernels/dtype.h"

namespace blossom {

struct CudaProbeOptions {
  int device = 0;
  int64_t copy_bytes = 1ll << 30;  // per buffer; two buffers are allocated
  int repetitions = 10;            // timed runs; the best is reported
  int warmup = 2;                  // untimed runs first (cuBLASLt heuristics, clocks ramping up)
  // GEMM shape: out[m, n] = x[m, k] * w[n, k]^T, large enough to fill 132 SMs at full rate.
  int64_t gemm_m = 8192, gemm_n = 8192, gemm_k = 8192;
  size_t gemm_workspace_bytes = 32ull << 20;  // as CudaBackend
};

class CudaHardwareProbe : public HardwareProbe {
 public:
  // FailedPrecondition (with CUDA's reason) when `options.device` is not a usable GPU;
  // InvalidArgument for non-positive sizes or repetitions. Allocates nothing on the device.
  static absl::StatusOr<std::unique_ptr<CudaHardwareProbe>> Create(const CudaProbeOptions& options);

  // "cuda device 0: NVIDIA H100 80GB HBM3 (sm_90)".
  std::string Describe() const override;
  // Bytes/s, read + written. ResourceExhausted if the two buffers do not fit.
  absl::StatusOr<double> MeasureCopyBandwidth() override;
  // FLOP/s = 2*m*n*k / best time. InvalidArgument for a non-float dtype; Internal when cuBLASLt
  // has no algorithm for the shape.
  absl::StatusOr<double> MeasureGemmFlops(DType weight_dtype) override;

 private:
  CudaHardwareProbe(const CudaProbeOptions& options, std::string device_name);

  CudaProbeOptions options_;
  std::string device_name_;
};

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_GPU_CUDA_HARDWARE_PROBE_H_
