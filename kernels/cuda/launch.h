// Launchers for the CUDA backend's kernels (internal to kernels/cuda).
//
// Host code (cuda_backend.cc) calls these; the .cu files implement them. Element types are a
// runtime value (ElemType) dispatched inside each launcher to a kernel templated over the
// element type, so no dtype template ever reaches a public header. Each launcher only enqueues
// work on `stream` and returns the launch error (never synchronises).
//
// Error flag: kernels that meet an index they cannot honour (a KV slot outside the pool, a row
// outside the gathered tensor) skip it and OR a bit into a device-side int (`error_flag`). The
// backend reads that flag whenever it synchronises, so bad metadata becomes a Status instead of a
// memory fault, without a host round trip per op.
//
// KV cache layout (one allocation, 64-bit offsets everywhere):
//   layer l, K: [num_blocks, num_heads, block_size, head_dim] at l * LayerStride()
//   layer l, V: same shape, right after K.
// A (block, head) pair is one contiguous [block_size, head_dim] tile, so attention reads whole
// tiles of one head with 16-byte vector loads, and SplitQkv writes each head's row contiguously.
#ifndef BLOSSOM_KERNELS_CUDA_LAUNCH_H_
#define BLOSSOM_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define BLOSSOM_HOST_DEVICE __host__ __device__
#else
#define BLOSSOM_HOST_DEVICE
#endif

namespace blossom {
namespace cuda {

// Numeric values match blossom::DType for the float types (checked in cuda_backend.cc).
enum class ElemType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline size_t ElemSize(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }

// Error bits OR-ed into the device error flag.
enum ErrorBits : int {
  kErrorBadSlot = 1,       // SplitQkvWriteCache: slot_mapping outside the KV pool
  kErrorBadGatherRow = 2,  // GatherRows: row index outside x
  kErrorBadMetadata = 4,   // Attention: context/query lengths inconsistent
};

struct KvLayout {
  void* base = nullptr;
  ElemType dtype = ElemType::kF32;
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t num_heads = 0;
  int32_t head_dim = 0;

  BLOSSOM_HOST_DEVICE int64_t TensorElems() const {
    return num_blocks * static_cast<int64_t>(num_heads) * block_size * head_dim;
  }
  BLOSSOM_HOST_DEVICE int64_t LayerStride() const { return 2 * TensorElems(); }  // elements
};

// out[t, :] = table[ids[t] - vocab_begin, :] or zeros outside [vocab_begin, vocab_begin + rows).
cudaError_t LaunchEmbedding(const void* table, ElemType table_type, int64_t table_rows,
                            int64_t hidden, const int32_t* ids, int64_t num_tokens,
                            int64_t vocab_begin, void* out, ElemType out_type, cudaStream_t stream);

// residual (optional, may be null): residual += x; out = LN(residual or x). gamma/beta have
// their own element type. fp32 statistics, biased variance. `registers`: rows of up to 2048
// 16-byte vectors in one dtype (16384 bf16/f16, 8192 f32 values) are held in registers (one
// round of loads instead of three passes), with the same bits as without. `pdl`: launched with
// programmatic dependent launch (PdlEnter in common.cuh) where the kernel supports it (rows of
// 16-byte vectors in one dtype).
cudaError_t LaunchLayerNorm(const void* x, void* residual, ElemType act_type, const void* gamma,
                            const void* beta, ElemType param_type, float eps, int64_t rows,
                            int64_t hidden, void* out, ElemType out_type, cudaStream_t stream,
                            bool registers = false, bool pdl = false);

// x = (x + bias) + residual. bias may be null.
cudaError_t LaunchAddBiasResidual(void* x, ElemType x_type, const void* bias, ElemType bias_type,
                                  const void* residual, ElemType residual_type, int64_t rows,
                                  int64_t cols, cudaStream_t stream);

// x = activation(x + bias) in place on [rows, cols]; used when the cuBLASLt epilogue cannot be.
// gelu: BLOOM's tanh approximation with the constant 0.79788456.
cudaError_t LaunchBiasActivation(void* x, ElemType x_type, const void* bias, ElemType bias_type,
                                 bool gelu, int64_t rows, int64_t cols, cudaStream_t stream);

// qkv [T, heads*3*d] ([head][q,k,v][d]) -> q [T, heads, d] and K/V of `layer` at slot_mapping.
// `pdl`: with programmatic dependent launch where the kernel supports it (16-byte vectors).
cudaError_t LaunchSplitQkvWriteCache(const void* qkv, ElemType act_type, const int32_t* slot_mapping,
                                     int64_t num_tokens, const KvLayout& kv, int32_t layer, void* q,
                                     int* error_flag, cudaStream_t stream, bool pdl = false);

// The decode attention block sizes (AttentionArgs::decode_threads).
constexpr bool DecodeThreadsSupported(int32_t threads) { return threads == 128 || threads == 256 || threads == 512; }

struct AttentionArgs {
  const void* q = nullptr;  // [T, heads, d], kv.dtype
  void* out = nullptr;      // [T, heads * d], kv.dtype
  KvLayout kv;
  int32_t layer = 0;
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_len = nullptr;   // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const float* slopes = nullptr;          // [heads]
  float scale = 1.0f;
  int32_t num_seqs = 0;
  int32_t num_tokens = 0;
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  int32_t max_blocks_per_seq = 0;
  int* error_flag = nullptr;
  // Prefill / mixed steps of an f16/bf16 cache with head_dim % 16 == 0 (<= 128) run on tensor
  // cores (attention_tc.cu); false keeps them on the CUDA-core kernel.
  bool allow_tensor_cores = true;
  // With allow_tensor_cores: the register-accumulator kernel (mma.sync, FlashAttention-2 layout)
  // instead of the WMMA one (attention_tc.cu), for head sizes 64, 80, 96 and 128.
  bool mma_prefill = false;
  // Threads of a decode block: 128, 256 or 512 (anything else runs 128). More threads put more
  // keys' loads in flight per partition (a 256-key partition is 8 dependent passes per phase at
  // 128 threads, 2 at 512); the sums then run in another order, so the last bits differ.
  int32_t decode_threads = 128;  // DecodeThreadsSupported
  // Decode steps' kernels launched with programmatic dependent launch (PdlEnter in common.cuh).
  bool pdl = false;
};

// Scratch the split-KV decode path needs (fp32), in bytes; 0 when it will not split.
size_t AttentionWorkspaceBytes(const AttentionArgs& args);
// Largest head_dim the kernels support.
constexpr int32_t kMaxHeadDim = 256;
// `workspace` must hold AttentionWorkspaceBytes(args) bytes (may be null when that is 0).
cudaError_t LaunchAttention(const AttentionArgs& args, void* workspace, cudaStream_t stream);

// out[r, :] = x[rows[r], :], bytes per row `row_bytes`.
cudaError_t LaunchGatherRows(const void* x, int64_t x_rows, int64_t row_bytes, const int32_t* rows,
                             int64_t num_rows, void* out, int* error_flag, cudaStream_t stream);

// Row-wise softmax, fp32 output (in place allowed).
cudaError_t LaunchSoftmax(const void* x, ElemType x_type, int64_t rows, int64_t cols, float* out,
                          cudaStream_t stream);

// out[r] = argmax of row r, ties to the lowest index.
cudaError_t LaunchArgmax(const void* x, ElemType x_type, int64_t rows, int64_t cols, int32_t* out,
                         cudaStream_t stream);

// Plain tiled GEMM (CUDA cores, fp32 accumulation) for shapes/alignments cuBLASLt refuses:
// out[M, N] = act(x[M, K] * w[N, K]^T + bias[N]).
cudaError_t LaunchFallbackGemm(const void* x, ElemType x_type, const void* w, ElemType w_type,
                               const void* bias, ElemType bias_type, bool gelu, int64_t m,
                               int64_t n, int64_t k, void* out, ElemType out_type,
                               cudaStream_t stream);

// Skinny GEMM (skinny_gemm.cu), the decode-sized Linear: out[M, N] = act(x[M, K] w[N, K]^T +
// bias[N]) for 1 <= M <= kSkinnyGemmMaxRows (kSkinnyMmaMaxRows for kMma), x and w of one element
// type, bias of any float type (or null), out of any float type. SkinnyGemmSupports says whether
// the operands qualify for a variant (16-byte aligned x and w, K a whole number of 16-byte
// vectors; kMma: f16 or bf16 only); LaunchSkinnyGemm refuses others with cudaErrorInvalidValue.
// kWholeK: a warp per 4 columns, each over all of K; kSplitK: a block's 4 warps share 4 columns
// and split K (4x the warps in flight, for few columns and long K); kMma: tensor cores, a block
// of 8 warps per 16 columns splitting K, x's rows as the narrow operand.
constexpr int64_t kSkinnyGemmMaxRows = 8;
constexpr int64_t kSkinnyMmaMaxRows = 16;
enum class SkinnyGemmVariant { kWholeK, kSplitK, kMma };
bool SkinnyGemmSupports(const void* x, const void* w, ElemType type, int64_t m, int64_t n, int64_t k,
                        SkinnyGemmVariant variant);
cudaError_t LaunchSkinnyGemm(const void* x, const void* w, ElemType type, const void* bias,
                             ElemType bias_type, bool gelu, int64_t m, int64_t n, int64_t k,
                             void* out, ElemType out_type, cudaStream_t stream,
                             SkinnyGemmVariant variant = SkinnyGemmVariant::kWholeK, bool pdl = false);

// dst[i] = convert(src[i]) between float element types.
cudaError_t LaunchConvert(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                          int64_t n, cudaStream_t stream);

}  // namespace cuda
}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CUDA_LAUNCH_H_
