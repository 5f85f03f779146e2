// The CPU reference backend: every op in fp32 on the host, multithreaded.
//
// This is the numerical reference the CUDA backend is tested against, and it runs every test on
// every machine. Weights are zero-copy views of the memory-mapped checkpoint (F32, F16 or BF16),
// widened to fp32 in registers inside the GEMM's micro-kernels (kernels/cpu/dot_tile.h), except
// Linear weights (and a tied embedding table, also the LM head): on a CPU with AVX-512 they are
// copied at load time into row pairs (kernels/cpu/weight_pairs.h, the same values in the order
// the AVX-512 tile reads), and with --quantize they are packed into int8 / int4 blocks
// (kernels/cpu/quant.h) or, with --quantize bf16, bf16 panels (kernels/cpu/bf16_panel_tile.h).
// Activations are fp32 (--quantize bf16 and int8/int4 round or quantize each Linear's input rows
// inside the GEMM only); the KV cache is fp32, or bf16 with --kv-cache-dtype bf16.
//
// Every op computes each output row from its own input row only, with an operation order that
// does not depend on the batch, so a sequence's results are bit-identical alone or batched.
//
// Step capture (Backend::BeginCapture) records the ops and replays them (op_recorder.h): no
// speed-up, the twin of CUDA graphs for tests.
//
// Thread-safety: ops are issued by one thread at a time (they use the internal thread pool);
// Allocate/Free are thread-safe.
#ifndef BLOSSOM_KERNELS_CPU_CPU_BACKEND_H_
#define BLOSSOM_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/op_recorder.h"
#include "kernels/cpu/thread_pool.h"

namespace blossom {

class CpuBackend : public Backend {
 public:
  // num_threads <= 0: all hardware threads.
  // spin_wait: the pool's threads spin between ops (thread_pool.h); for a process whose
  // backends together have no more threads than the machine has cores.
  explicit CpuBackend(int num_threads = 0, bool spin_wait = false);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  DeviceKind device() const override { return DeviceKind::kHost; }
  DType activation_dtype(DType) const override { return DType::kF32; }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  absl::StatusOr<OwnedTensor> ImportWeight(const Tensor& host) override;
  // kInt8 / kInt4: packs the weight into a backend-owned kQ8G32 / kQ4G32 tensor (quant.h);
  // InvalidArgument if its row length is not a multiple of 32. On a CPU with AVX512-VNNI, for a
  // row count that is a multiple of 16: kQ8G32Panel16 / kQ4G32Panel16 instead (the same codes in
  // panels for quant_panel_tile.h), except int8 where AMX-INT8 is usable (its tiles read kQ8G32
  // in place, so it stays). kBf16: a backend-owned kBF16Panel16 copy (bf16_panel_tile.h: rounded to bf16, panels
  // of 16 rows, the last padded), run with bf16 activations by vdpbf16ps where the CPU has
  // AVX512-BF16 (else by the portable twin: the same bits, far slower); InvalidArgument for an odd
  // row length. kNone: a backend-owned
  // row-paired copy (weight_pairs.h) where the GEMM runs its AVX-512 path and the row length is
  // a multiple of 8, else ImportWeight's zero-copy view.
  // Either copy is made in slices of about 32 MiB of host rows, `rows_done` called after each.
  using Backend::ImportLinearWeight;
  absl::StatusOr<OwnedTensor> ImportLinearWeight(const Tensor& host, WeightQuant quant,
                                                 const HostRowsDone& rows_done) override;
  // As ImportLinearWeight with kNone (Embedding reads row-paired tables too): the tied LM head's
  // decode GEMV over row pairs is 1.18x (bf16) / 1.08x (f32) faster than over the rows.
  absl::StatusOr<OwnedTensor> ImportEmbeddingAndLinearWeight(
      const Tensor& host, const HostRowsDone& rows_done) override;
  absl::Status CopyToDevice(const void* host, Tensor dst) override;
  absl::Status CopyToHost(const Tensor& src, void* host) override;
  absl::Status Synchronize() override { return recorder_.RefuseWhileCapturing("Synchronize"); }
  // An F32 or BF16 cache (cpu_backend_kv.cc): bf16 rows are rounded when written and widened
  // exactly for attention, whose order of operations stays attention.h's.
  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(const KvCacheSpec& spec) override;
  bool SupportsKvCacheDtype(DType kv_dtype, DType activation_dtype) const override {
    return activation_dtype == DType::kF32 && (kv_dtype == DType::kF32 || kv_dtype == DType::kBF16);
  }

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

  // Captures record each op as a closure (op_recorder.h): the CPU twin of the CUDA backend's
  // graphs, with the same refusals, so the engine's graph path is tested here.
  bool SupportsCapture() const override { return true; }
  absl::Status BeginCapture() override { return recorder_.Begin(); }
  absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() override { return recorder_.End(); }

  ThreadPool* pool() { return pool_.get(); }

 protected:
  void Free(void* data, size_t bytes) override;

 private:
  // copy_rows(begin, end) over [0, rows) in slices of ~32 MiB of host rows (a multiple of
  // `row_multiple`, a power of two: whole row pairs or panels), then rows_done(begin, end) for
  // each, if set.
  static void CopyInSlices(int64_t rows, size_t row_bytes, int64_t row_multiple, const HostRowsDone& rows_done,
                           const std::function<void(int64_t, int64_t)>& copy_rows);

  // ImportLinearWeight's kBf16 case.
  absl::StatusOr<OwnedTensor> ImportBf16Panels(const Tensor& host, const HostRowsDone& rows_done);

  std::unique_ptr<ThreadPool> pool_;
  OpRecorder recorder_;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_CPU_BACKEND_H_
