// The device abstraction every model computation goes through.
//
// A Backend owns device memory, a KV-cache layout and an implementation of each op the BLOOM
// forward needs. The engine (engine/) talks only to this interface and never includes a device
// header; the CPU backend (kernels/cpu) is the reference, the CUDA backend implements the same
// contract. Tensors passed to ops live in memory allocated by the same backend.
//
// Dtypes are runtime properties. Weights may be F32, F16 or BF16; activations use
// activation_dtype() (F32 on the CPU backend). Every op that accumulates does so in fp32.
//
// Tokens of a step are "flattened": all new tokens of all sequences in one [num_tokens, ...]
// tensor, so a step can mix prefill chunks and decode tokens (continuous batching). Each
// sequence's keys and values live in fixed-size KV blocks reached through its block table.
//
// Thread-safety: a Backend is used by one engine thread at a time (ops are issued in order on one
// stream). Allocation is thread-safe.
#ifndef BLOSSOM_KERNELS_BACKEND_H_
#define BLOSSOM_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"
#include "kernels/weight_quant.h"

namespace blossom {

class Backend;

// Owns one allocation on a backend's device; frees it on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, size_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void Reset();

 private:
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Host memory that copies to a device are staged from; its deleter frees it.
using HostBuffer = std::unique_ptr<void, void (*)(void*)>;

// A tensor together with the buffer that holds it (empty storage for zero-copy views).
struct OwnedTensor {
  Tensor tensor;
  DeviceBuffer storage;
};

// Geometry of the paged KV cache for one rank.
struct KvCacheSpec {
  int32_t num_layers = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // tokens per block
  int32_t num_heads = 0;    // heads on this rank
  int32_t head_dim = 0;
  DType dtype = DType::kF32;

  // Bytes of K and V for one block across all layers.
  size_t BytesPerBlock() const;
};

// The backend's KV storage: layout is private to the backend (the CUDA layout differs).
class KvCache {
 public:
  KvCache();
  virtual ~KvCache() = default;
  virtual const KvCacheSpec& spec() const = 0;
  // Unique for the life of the process (never reused, unlike the object's address): what a
  // captured step graph, which holds this cache's device addresses, is keyed on.
  uint64_t id() const { return id_; }

 private:
  uint64_t id_;
};

// Per-step description of the flattened batch for attention, in device memory (I32 tensors).
// Sequence s owns token rows [query_start[s], query_start[s+1]); its new tokens sit at positions
// [context_len[s] - num_new, context_len[s]) where num_new = query_start[s+1] - query_start[s].
// block_tables is [num_seqs, max_blocks_per_seq]; slot_mapping[t] is the KV slot
// (block * block_size + offset) that token row t writes, or kPaddingSlot: a padding row (a step
// graph's batch filled up to its bucket) whose K/V is written nowhere.
inline constexpr int32_t kPaddingSlot = -1;
struct AttentionMetadata {
  int32_t num_seqs = 0;
  int32_t num_tokens = 0;
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  int32_t max_blocks_per_seq = 0;
  Tensor query_start;    // I32 [num_seqs + 1]
  Tensor context_len;    // I32 [num_seqs]
  Tensor block_tables;   // I32 [num_seqs, max_blocks_per_seq]
  Tensor slot_mapping;   // I32 [num_tokens]
};

enum class Activation : uint8_t { kNone = 0, kBloomGelu = 1 };

// A captured step (Backend::BeginCapture): the ops issued during the capture, replayed as one
// unit (a CUDA graph on "cuda"). A replay runs the same ops on the same tensors, with the same
// host-side arguments (shapes, metadata scalars, pointers) they had at capture; only the contents
// of device memory (the step's inputs, uploaded before the replay) differ between replays. So
// whatever a step computes from host values must be fixed for the graph: its batch is padded to
// a bucket, and grids are sized for a capacity the device-side metadata stays within.
//
// Thread-safety: replayed by the thread that issues the backend's ops. The graph holds what it
// needs to stay valid (the CUDA backend's scratch buffers) but not the tensors it was captured
// with: its owner must drop it before freeing those.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Issues the captured ops again, in order, like the ops themselves would (asynchronously on a
  // device backend: errors found by kernels surface at the next Synchronize).
  virtual absl::Status Replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual DeviceKind device() const = 0;
  // The dtype activations are kept in for weights of `weight_dtype`.
  virtual DType activation_dtype(DType weight_dtype) const = 0;

  // ---- Memory ----
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Allocates a tensor of the given shape on this device.
  absl::StatusOr<OwnedTensor> AllocateTensor(DType dtype, std::initializer_list<int64_t> shape);
  // Makes a host weight usable by ops. The CPU backend returns a zero-copy view (the caller keeps
  // the host memory alive); a GPU backend copies it into device memory it owns.
  virtual absl::StatusOr<OwnedTensor> ImportWeight(const Tensor& host) = 0;
  // Makes the weight [N, K] of a Linear usable, quantized as `quant` asks (kNone: ImportWeight
  // here; the CPU backend may repack it, see cpu_backend.h). Call it only for a weight no op but
  // Linear reads: the result may be a backend-owned tensor of a dtype only Linear accepts
  // (block-quantized or row-paired, kernels/dtype.h). This default serves kNone and refuses the
  // others with Unimplemented naming the backend and the mode: a backend without quantized
  // kernels (CUDA for now) never dequantizes behind the user's back.
  //
  // A backend that copies the weight on the host calls `rows_done` (if set) with each range of
  // host rows [begin, end) it has finished reading, as it goes, so that the caller can give that
  // memory back before the copy is whole: otherwise a large weight (a 1 GB embedding) is resident
  // twice at once. Others may never call it.
  using HostRowsDone = std::function<void(int64_t begin, int64_t end)>;
  virtual absl::StatusOr<OwnedTensor> ImportLinearWeight(const Tensor& host, WeightQuant quant,
                                                         const HostRowsDone& rows_done);
  absl::StatusOr<OwnedTensor> ImportLinearWeight(const Tensor& host, WeightQuant quant) {
    return ImportLinearWeight(host, quant, nullptr);
  }
  // Makes a [vocab, hidden] table usable by both Embedding and Linear (a tied LM head): the
  // result may be in a layout only those two ops accept. `rows_done` as above. This default is
  // ImportWeight.
  virtual absl::StatusOr<OwnedTensor> ImportEmbeddingAndLinearWeight(
      const Tensor& host, const HostRowsDone& rows_done);
  virtual absl::Status CopyToDevice(const void* host, Tensor dst) = 0;
  // Host memory to stage copies to the device from, 64-byte aligned: pinned on a device backend
  // (the CUDA one), where a CopyToDevice from it is an asynchronous DMA, so the caller must not
  // write it again before the next Synchronize; plain memory in this default.
  virtual absl::StatusOr<HostBuffer> AllocateHostStaging(size_t bytes);
  virtual absl::Status CopyToHost(const Tensor& src, void* host) = 0;
  // Blocks until all issued work is done.
  virtual absl::Status Synchronize() = 0;
  // OK unless the device is unusable for good: on CUDA, a sticky error (an illegal address, a
  // kernel fault, an uncorrectable ECC error) that every later call in this process returns.
  // Does not wait for work in flight.
  virtual absl::Status Health() { return absl::OkStatus(); }
  // dst[r, col_begin + c] = src[r, c] for every row r and column c of src: writes src [R, w] as
  // columns [col_begin, col_begin + w) of dst [R, W], both in this backend's memory, same dtype.
  // It is how the vocabulary-parallel logits slices become one [rows, vocab] tensor without
  // leaving the device. This default serves backends whose memory is host memory
  // (device() == kHost) and refuses the others with Unimplemented; device backends override it.
  virtual absl::Status CopyColumns(const Tensor& src, Tensor dst, int64_t col_begin);

  virtual absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(const KvCacheSpec& spec) = 0;
  // Whether CreateKvCache and the attention ops take a KV cache of `kv_dtype` beside activations
  // of `activation_dtype` (--kv-cache-dtype). By default only the activation dtype.
  virtual bool SupportsKvCacheDtype(DType kv_dtype, DType activation_dtype) const {
    return kv_dtype == activation_dtype;
  }

  // ---- Ops ----
  // out[t, :] = table[ids[t] - vocab_begin, :] for ids inside [vocab_begin, vocab_begin + rows),
  // zeros otherwise (vocabulary-parallel embedding: the partial results are all-reduced).
  virtual absl::Status Embedding(const Tensor& table, const Tensor& ids, int64_t vocab_begin,
                                 Tensor out) = 0;
  // If residual is non-empty: residual += x (in place), then out = LN(residual). Else out = LN(x).
  // LayerNorm statistics in fp32, biased variance, like torch.nn.LayerNorm.
  virtual absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float eps, Tensor residual, Tensor out) = 0;
  // out[M, N] = activation(x[M, K] * weight[N, K]^T + bias[N]); bias may be empty. weight may be
  // block-quantized or row-paired if it came from ImportLinearWeight.
  // Each output row depends only on its input row (batch invariance).
  virtual absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Activation activation, Tensor out) = 0;
  // x = (x + bias) + residual, elementwise over rows; bias may be empty. Used after a row-parallel
  // linear whose bias must be added once, after the all-reduce.
  virtual absl::Status AddBiasResidual(Tensor x, const Tensor& bias, const Tensor& residual) = 0;
  // Splits fused qkv [T, heads * 3 * head_dim] (row layout [head][q,k,v][d]) into q [T, heads, d]
  // and writes k, v of every token into the cache of `layer` at metadata.slot_mapping.
  virtual absl::Status SplitQkvWriteCache(const Tensor& qkv, const AttentionMetadata& metadata,
                                          int32_t layer, KvCache& cache, Tensor q) = 0;
  // Causal ALiBi attention of the new tokens over their sequence's cached keys (which include the
  // new tokens, written by SplitQkvWriteCache). scores = slope_h * key_position + (q.k) * scale,
  // softmax in fp32. out is [T, heads * d] with index h * d + e. slopes: F32 [heads].
  virtual absl::Status Attention(const Tensor& q, const AttentionMetadata& metadata, int32_t layer,
                                 const KvCache& cache, const Tensor& slopes, float scale,
                                 Tensor out) = 0;
  // out[r, :] = x[rows[r], :]; rows is I32 on the device.
  virtual absl::Status GatherRows(const Tensor& x, const Tensor& rows, Tensor out) = 0;
  // Row-wise softmax in fp32 (in place allowed: out may alias x).
  virtual absl::Status Softmax(const Tensor& x, Tensor out) = 0;
  // out[r] = argmax over row r (ties: lowest index). out is I32 [rows].
  virtual absl::Status Argmax(const Tensor& x, Tensor out) = 0;

  // ---- Step graphs (see StepGraph) ----
  // Between BeginCapture and EndCapture the ops above are recorded, not run. Whatever a CUDA
  // graph cannot hold fails with FailedPrecondition meanwhile: Allocate, the copies to and from
  // the host, Synchronize, and an op that would have to grow a scratch buffer (run the same step
  // once uncaptured first: that sizes them). After an op failed while capturing, EndCapture must
  // still be called (it ends the capture) and its graph, if any, dropped. These defaults refuse
  // (Unimplemented): a backend without graphs runs every step uncaptured.
  virtual bool SupportsCapture() const { return false; }
  virtual absl::Status BeginCapture();
  virtual absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture();

  // The row counts (M) a warm-up should run Linear at, for steps of up to `max_rows` rows, so
  // that every per-shape plan the backend keeps (the CUDA backend's cuBLASLt plans, keyed on
  // bucketed M, and their timed algorithm choice) is made before serving. Empty (this default)
  // for a backend with nothing to prepare.
  virtual std::vector<int64_t> WarmUpRowCounts(int64_t max_rows) const {
    (void)max_rows;
    return {};
  }

 protected:
  friend class DeviceBuffer;
  virtual void Free(void* data, size_t bytes) = 0;
};

// The FailedPrecondition a backend returns for `what` (a copy, an allocation, a wait) between
// BeginCapture and EndCapture. Shared by the implementations.
absl::Status RefusedWhileCapturing(absl::string_view what);

// InvalidArgument unless Backend::CopyColumns(src, dst, col_begin) is well formed: both rank 2,
// one unblocked dtype, as many rows, and the columns inside dst. Shared by the implementations.
absl::Status CheckCopyColumns(const Tensor& src, const Tensor& dst, int64_t col_begin);

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_BACKEND_H_
