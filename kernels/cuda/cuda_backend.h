// The CUDA backend: every Backend op on one NVIDIA GPU (written for sm_90, H100/H200).
//
// Numerics: activations are kept in the weights' dtype (BF16 -> BF16, F16 -> F16, F32 -> F32),
// and every reduction, GEMM accumulation, LayerNorm statistic and softmax runs in fp32.
// Options::upcast_weights_to_f32 imports half-precision weights as F32 instead (then every
// activation is F32): slower and twice the memory, but it reproduces fp32 references such as the
// Hugging Face goldens token for token.
//
// Linear uses cuBLASLt (fp32 compute, never TF32) with the bias, and where it matches BLOOM's tanh
// GELU, bias+GELU fused into the epilogue; the GELU epilogue is checked against BLOOM's formula
// once at Create() and replaced by a fused bias+GELU kernel if it differs. The chosen algorithm is
// cached per (shape, dtypes, epilogue, alignment). Shapes cuBLASLt has no algorithm for go to a
// CUDA-core GEMM. Decode-sized linears (M <= 8) may run the skinny GEMM instead
// (Options::skinny_gemm, cuda_backend_linear.cc).
//
// KV cache layout (private to this backend): per layer, K then V, each
// [num_blocks, num_heads, block_size, head_dim] in the activation dtype (see launch.h).
//
// Batch invariance: NOT guaranteed. cuBLASLt may pick different kernels (and split-K) for
// different M, and attention takes a different path for all-decode steps than for steps carrying
// a prefill chunk. The decode path's own split depends only on the context length.
//
// Errors: bad shapes/dtypes -> InvalidArgument before anything is launched. Indices only known on
// the device (KV slots, gather rows, block ids) are checked by the kernels, which skip them and
// raise a device error flag; the next Synchronize()/CopyToHost() returns InvalidArgument naming
// it. CUDA/cuBLAS failures -> Internal with the call and the error string.
//
// Thread-safety: ops, copies and Synchronize are issued by one thread at a time (the engine
// thread), all on one compute stream. Allocate/Free may be called from any thread. ImportWeight
// must not run concurrently with another ImportWeight (it owns the staging buffers).
#ifndef BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_H_
#define BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace blossom {

class CudaBackend : public Backend {
 public:
  struct Options {
    int device = 0;
    // Size of each of the two pinned staging buffers ImportWeight streams weights through.
    size_t staging_bytes = 32ull << 20;
    // cuBLASLt workspace (allocated once; 32 MiB is what NVIDIA recommends for Hopper).
    size_t gemm_workspace_bytes = 32ull << 20;
    // Import F16/BF16 weights as F32 (activation_dtype() is then F32 for every weight dtype).
    bool upcast_weights_to_f32 = false;
    // Allow cuBLASLt's GELU_BIAS epilogue for a dtype when the start-up check finds it equal to
    // BLOOM's gelu in that dtype.
    bool allow_gelu_epilogue = true;
    // Order each new GEMM plan's cuBLASLt candidates by timing them on its first call (a host
    // sync; see LtGemm). Off by default: without a warm-up over WarmUpRowCounts() before serving
    // (BloomModel::WarmUpLinearPlans; the server does it, and turns this on at tp 1), the first
    // step of each bucket pays for the timing. The timing waits for the
    // stream in the middle of a step: with asynchronous NCCL collectives on this stream, a peer
    // that dies during such a step would block that wait without a bound (warm up before serving).
    bool time_gemm_candidates = false;
    // Prefill and mixed steps of f16/bf16 activations with head_dim % 16 == 0 (<= 128) compute
    // attention on tensor cores (flash-attention style, attention_tc.cu); false keeps every step
    // on the CUDA-core kernels (the reference the GPU tests compare the tensor-core kernel with).
    bool tensor_core_attention = true;
    // With tensor_core_attention: the register-accumulator prefill kernel (mma.sync,
    // FlashAttention-2 layout; attention_tc.cu) for head sizes 64/80/96/128, instead of the
    // WMMA one, whose S, P and O go through shared memory. Measured on an H100: a 2048-token
    // 7b1 prefill 52.8 ms against WMMA's 75.2 (benchmarks/results/2026-11-26-gpu-h100).
    // false: the WMMA kernel (which serves the other head sizes either way).
    bool mma_prefill_attention = true;
    // Threads per decode attention block (128, 256 or 512; cuda::AttentionArgs::decode_threads).
    // 128 is the measured one; 512 puts four times the keys' loads in flight per partition,
    // for long contexts (at a 2k context a batch-1 7b1 layer's decode attention ran 53 us on an
    // H200, ~0.6 TB/s: latency, not bandwidth). Not yet measured on a GPU.
    int32_t decode_attention_threads = 128;
    // LayerNorm rows held in registers (cuda::LaunchLayerNorm's `registers`; the same bits):
    // one round of loads instead of three passes through L2 (~6 us per LayerNorm at batch 1 on
    // an H200, 62 of them per 7b1 step). Not yet measured on a GPU.
    bool register_layernorm = false;
    // Linears of up to cuda::kSkinnyGemmMaxRows (8) rows, the decode steps of small batches, may
    // run the skinny GEMM (skinny_gemm.cu, a batched GEMV that streams the weights once) instead
    // of cuBLASLt: with time_gemm_candidates, per shape where it measured faster at warm-up;
    // without, always. false keeps every Linear on cuBLASLt.
    bool skinny_gemm = true;
    // With skinny_gemm: the split-K skinny GEMM (cuda::SkinnyGemmVariant::kSplitK, 4x the warps
    // in flight for shapes of few columns and long K) is a candidate too: timed against the
    // others with time_gemm_candidates, and without timing it runs instead of the whole-K one.
    // Not yet measured on a GPU.
    bool skinny_split_k = false;
    // With skinny_gemm: the tensor-core skinny GEMM (cuda::SkinnyGemmVariant::kMma; f16/bf16,
    // up to cuda::kSkinnyMmaMaxRows (16) rows: x's rows are the narrow mma operand, so more rows
    // cost no more arithmetic than one, where the CUDA-core variants lost to cuBLASLt from 2
    // rows) is a candidate too, also for 9 to 16 rows; without timing it runs wherever it applies.
    // Not yet measured on a GPU.
    bool skinny_mma = false;
    // Decode-step kernels (LayerNorm, the skinny GEMM, SplitQkv, decode attention) launched with
    // programmatic dependent launch (PdlEnter in common.cuh): each may be scheduled while the
    // one before it finishes, hiding launch latency (a batch-1 7b1 step is ~300 launches of a
    // few microseconds). The same kernels and results either way. Not yet measured on a GPU.
    bool programmatic_launch = false;
  };

  // Fails (FailedPrecondition) when no usable device is present, never crashes.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Options& options);
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create() { return Create(Options()); }
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  DeviceKind device() const override { return DeviceKind::kCuda; }
  DType activation_dtype(DType weight_dtype) const override;

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  absl::StatusOr<OwnedTensor> ImportWeight(const Tensor& host) override;
  // ImportLinearWeight is Backend's: --quantize int8/int4 is Unimplemented here (no quantized
  // kernels yet; the weights are never dequantized behind the user's back).
  absl::Status CopyToDevice(const void* host, Tensor dst) override;
  // Pinned (cudaHostAlloc): a CopyToDevice from it does not wait for the host.
  absl::StatusOr<HostBuffer> AllocateHostStaging(size_t bytes) override;
  absl::Status CopyToHost(const Tensor& src, void* host) override;
  absl::Status Synchronize() override;
  // cudaStreamQuery on the compute stream: success or "not ready" while the context is usable;
  // after a sticky error every call, this one included, returns that error.
  absl::Status Health() override;
  // One cudaMemcpy2DAsync on the compute stream, device to device.
  absl::Status CopyColumns(const Tensor& src, Tensor dst, int64_t col_begin) override;
  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(const KvCacheSpec& spec) override;

  absl::Status Embedding(const Tensor& table, const Tensor& ids, int64_t vocab_begin,
                         Tensor out) override;
  absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor residual, Tensor out) override;
  absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      Activation activation, Tensor out) override;
  absl::Status AddBiasResidual(Tensor x, const Tensor& bias, const Tensor& residual) override;
  absl::Status SplitQkvWriteCache(const Tensor& qkv, const AttentionMetadata& metadata,
                                  int32_t layer, KvCache& cache, Tensor q) override;
  absl::Status Attention(const Tensor& q, const AttentionMetadata& metadata, int32_t layer,
                         const KvCache& cache, const Tensor& slopes, float scale,
                         Tensor out) override;
  absl::Status GatherRows(const Tensor& x, const Tensor& rows, Tensor out) override;
  absl::Status Softmax(const Tensor& x, Tensor out) override;
  absl::Status Argmax(const Tensor& x, Tensor out) override;

  // Step capture as a CUDA graph (cuda_backend_graph.cc): BeginCapture captures the compute
  // stream (thread-local mode: a CUDA call of this thread that a capture forbids spoils it),
  // EndCapture instantiates what was captured, Replay is one cudaGraphLaunch on the stream. A
  // graph holds the attention workspace it was captured with (a later, larger step only retires
  // it from the backend). Attention refuses to grow its workspace while capturing: run the step
  // once uncaptured first. Checked on an H200 (cuda_backend_graph_test, bloom_cuda_test).
  bool SupportsCapture() const override { return true; }
  // GemmRowBuckets(max_rows): one M per plan bucket (gemm_plan_policy.h).
  std::vector<int64_t> WarmUpRowCounts(int64_t max_rows) const override;
  absl::Status BeginCapture() override;
  absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() override;

  // Free device memory right now (cudaMemGetInfo). Size the KV pool as
  // fraction * (FreeDeviceMemory() after weights and the workspace are allocated).
  absl::StatusOr<size_t> FreeDeviceMemory() const;
  absl::StatusOr<size_t> TotalDeviceMemory() const;
  // KV blocks of `bytes_per_block` (BloomModel::KvBytesPerBlock) that fit in `fraction` of the
  // memory free now: call it after the weights are imported and one forward of the largest step
  // has allocated its workspace. InvalidArgument for a fraction outside (0, 1] or 0 bytes;
  // ResourceExhausted when not even one block fits.
  absl::StatusOr<int32_t> KvBlocksThatFit(size_t bytes_per_block, double fraction) const;
  // The compute stream (a cudaStream_t), for libraries that must order work with the backend's
  // ops (GPU sampling, NCCL). Apart from Synchronize/CopyToHost (and the GEMM timing above), no
  // op waits for it: an outgrown attention workspace is retired and freed at the next
  // Synchronize, so a collective stuck on the stream is only ever waited for there, after the
  // communicator's bounded Fence().
  void* stream() const;
  // Whether Linear fuses bias+GELU into cuBLASLt's epilogue for activations of `dtype` (decided
  // at Create() by checking the epilogue against BLOOM's tanh GELU in that dtype).
  bool gelu_epilogue_in_use(DType dtype) const;
  // Name and compute capability of the device, e.g. "NVIDIA H100 80GB HBM3 (sm_90)".
  std::string device_name() const;

 protected:
  void Free(void* data, size_t bytes) override;

 private:
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  absl::Status CheckErrorFlag();
  // FailedPrecondition naming `what` between BeginCapture and EndCapture.
  absl::Status RefuseWhileCapturing(const char* what) const;
  absl::Status CalibrateGeluEpilogue();
  // Linear's paths and the choice between them (cuda_backend_linear.cc): the skinny GEMM
  // variant to run (cuda::SkinnyGemmVariant as an int), or kUseCublasLt.
  static constexpr int kUseCublasLt = -1;
  absl::Status LinearLt(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu, Tensor out);
  absl::Status LinearSkinny(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu, Tensor out,
                            int variant);
  // The skinny GEMM variants the options allow and the operands qualify for, the one that runs
  // untimed first; empty: cuBLASLt only. Inline storage: Linear asks on every call.
  using SkinnyVariants = absl::InlinedVector<int, 3>;
  SkinnyVariants SkinnyVariantsFor(const Tensor& x, const Tensor& weight) const;
  absl::StatusOr<int> ChooseDecodeLinear(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu,
                                         Tensor out, const SkinnyVariants& variants);
  absl::StatusOr<bool> GeluEpilogueMatchesBloom(DType dtype);

  std::unique_ptr<Impl> impl_;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_CUDA_BACKEND_H_
