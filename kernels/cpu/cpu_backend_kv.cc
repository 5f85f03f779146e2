// The CPU backend's KV cache and the ops that use it: CreateKvCache, SplitQkvWriteCache,
// Attention (cpu_backend.h).
//
// The cache holds fp32 rows, or bf16 rows (KvCacheSpec::dtype; --kv-cache-dtype bf16): half the
// memory per token, so twice the tokens in the same budget. A bf16 row is the fp32 K or V row
// rounded to nearest even when it is written; attention widens it back to fp32 (exactly) in
// registers as it reads it, with attention.h's operation order unchanged. So a bf16 cache gives
// exactly the fp32 cache's result for K and V rows that were already bf16 values, and batch
// invariance holds as before.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_backend_util.h"

namespace blossom {
namespace {

using cpu_internal::Check;
using cpu_internal::IsF32;
using cpu_internal::Scratch;

// Host KV storage: per layer, K and V each [num_blocks, heads, block_size, head_dim] of
// spec.dtype, F32 or BF16 (the CUDA backend's layout). Head-major inside a block because attention
// reads one head's rows for many queries: a block's rows of one head are then 4 KiB contiguous
// (block 16, head_dim 64, fp32) instead of 256-byte pieces 4 KiB apart, which mapped onto few
// cache sets and missed.
class CpuKvCache : public KvCache {
 public:
  explicit CpuKvCache(const KvCacheSpec& spec, DeviceBuffer storage)
      : spec_(spec), storage_(std::move(storage)), elem_(DTypeSize(spec.dtype)) {}
  const KvCacheSpec& spec() const override { return spec_; }

  size_t LayerStride() const {
    return 2ull * spec_.num_blocks * spec_.block_size * spec_.num_heads * spec_.head_dim;
  }
  // Head h's key (value) row of a slot (block * block_size + offset), of spec().dtype.
  char* Key(int32_t layer, int64_t slot, int64_t h) const {
    const int64_t block = slot / spec_.block_size, offset = slot % spec_.block_size;
    return base() + (layer * LayerStride() +
                     ((block * spec_.num_heads + h) * spec_.block_size + offset) * spec_.head_dim) *
                        elem_;
  }
  char* Value(int32_t layer, int64_t slot, int64_t h) const {
    return Key(layer, slot, h) +
           static_cast<size_t>(spec_.num_blocks) * spec_.block_size * spec_.num_heads * spec_.head_dim * elem_;
  }

 private:
  char* base() const { return static_cast<char*>(storage_.data()); }
  KvCacheSpec spec_;
  DeviceBuffer storage_;
  size_t elem_;
};

// A run of consecutive new tokens of one sequence, attended together (attention.h).
struct QueryBlock {
  int32_t seq;
  int32_t first_token;  // row of the step's q / out
  int32_t first_pos;    // its position in the sequence
  int32_t num_queries;
};

// Head h's key and value rows of keys 0 .. num_keys - 1 of a sequence (its block table), as
// pointers to the cache's elements (T: float, or uint16_t for bf16 bits).
template <typename T>
void KeyValueRows(const CpuKvCache& kv, int32_t layer, int64_t h, const int32_t* table, int64_t num_keys,
                  std::vector<const T*>& k_rows, std::vector<const T*>& v_rows) {
  const int64_t bs = kv.spec().block_size, d = kv.spec().head_dim;
  k_rows.resize(num_keys);
  v_rows.resize(num_keys);
  for (int64_t j0 = 0; j0 < num_keys; j0 += bs) {  // a cache block's rows are contiguous
    const int64_t slot = static_cast<int64_t>(table[j0 / bs]) * bs;
    const T* k = reinterpret_cast<const T*>(kv.Key(layer, slot, h));
    const T* v = reinterpret_cast<const T*>(kv.Value(layer, slot, h));
    for (int64_t o = 0; o < std::min<int64_t>(bs, num_keys - j0); ++o) {
      k_rows[j0 + o] = k + o * d;
      v_rows[j0 + o] = v + o * d;
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvCache>> CpuBackend::CreateKvCache(const KvCacheSpec& spec) {
  if (spec.num_layers <= 0 || spec.num_blocks <= 0 || spec.block_size <= 0 ||
      spec.num_heads <= 0 || spec.head_dim <= 0) {
    return absl::InvalidArgumentError("cpu backend: KV cache dimensions must be positive");
  }
  if (!SupportsKvCacheDtype(spec.dtype, DType::kF32)) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: the KV cache is f32 or bf16, not ",
                                                   DTypeName(spec.dtype)));
  }
  size_t bytes = spec.BytesPerBlock() * spec.num_blocks;
  absl::StatusOr<DeviceBuffer> storage = Allocate(bytes);
  if (!storage.ok()) return storage.status();
  std::memset(storage->data(), 0, bytes);
  return std::unique_ptr<KvCache>(new CpuKvCache(spec, std::move(*storage)));
}

absl::Status CpuBackend::SplitQkvWriteCache(const Tensor& qkv, const AttentionMetadata& md,
                                            int32_t layer, KvCache& cache, Tensor q) {
  KvCache* cache_ptr = &cache;
  if (recorder_.Record([=, this] { return SplitQkvWriteCache(qkv, md, layer, *cache_ptr, q); }))
    return absl::OkStatus();
  auto& kv = static_cast<CpuKvCache&>(cache);
  const KvCacheSpec& spec = kv.spec();
  const int64_t heads = spec.num_heads, d = spec.head_dim, tokens = md.num_tokens;
  if (auto s = Check(IsF32(qkv) && IsF32(q) && qkv.dim(0) == tokens &&
                         qkv.numel() == tokens * heads * 3 * d && q.numel() == tokens * heads * d &&
                         layer >= 0 && layer < spec.num_layers,
                     "SplitQkvWriteCache", "bad shapes or dtypes");
      !s.ok())
    return s;
  const int32_t* slots = md.slot_mapping.as<const int32_t>();
  const int64_t num_slots = static_cast<int64_t>(spec.num_blocks) * spec.block_size;
  for (int64_t t = 0; t < tokens; ++t) {
    if ((slots[t] < 0 && slots[t] != kPaddingSlot) || slots[t] >= num_slots)
      return absl::InvalidArgumentError(absl::StrCat("SplitQkvWriteCache: slot ", slots[t],
                                                     " of token ", t, " outside the KV pool"));
  }
  pool_->ParallelFor(tokens, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* row = qkv.as<const float>() + t * heads * 3 * d;
      for (int64_t h = 0; h < heads; ++h) {
        const float* src = row + h * 3 * d;  // [q | k | v] of head h
        std::memcpy(q.as<float>() + (t * heads + h) * d, src, d * sizeof(float));
        if (slots[t] == kPaddingSlot) continue;
        // Rounded to nearest even into a bf16 cache (ConvertFromF32: PyTorch's cast).
        ConvertFromF32(src + d, kv.Key(layer, slots[t], h), spec.dtype, d);
        ConvertFromF32(src + 2 * d, kv.Value(layer, slots[t], h), spec.dtype, d);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(const Tensor& q, const AttentionMetadata& md, int32_t layer,
                                   const KvCache& cache, const Tensor& slopes, float scale,
                                   Tensor out) {
  const KvCache* cache_ptr = &cache;
  if (recorder_.Record(
          [=, this] { return Attention(q, md, layer, *cache_ptr, slopes, scale, out); }))
    return absl::OkStatus();
  const auto& kv = static_cast<const CpuKvCache&>(cache);
  const KvCacheSpec& spec = kv.spec();
  const int64_t heads = spec.num_heads, d = spec.head_dim, bs = spec.block_size;
  if (auto s = Check(IsF32(q) && IsF32(out) && IsF32(slopes) && slopes.numel() == heads &&
                         q.numel() == static_cast<int64_t>(md.num_tokens) * heads * d &&
                         out.numel() == q.numel(),
                     "Attention", "bad shapes or dtypes");
      !s.ok())
    return s;
  const int32_t* query_start = md.query_start.as<const int32_t>();
  const int32_t* context_len = md.context_len.as<const int32_t>();
  const int32_t* tables = md.block_tables.as<const int32_t>();
  // Each sequence's new tokens in runs of up to kAttentionQueryBlock (attention.h).
  std::vector<QueryBlock>& blocks = Scratch<QueryBlock>(0, 0);
  for (int32_t s = 0; s < md.num_seqs; ++s) {
    const int32_t num_new = query_start[s + 1] - query_start[s];
    if (num_new < 0 || context_len[s] < num_new ||
        (context_len[s] + bs - 1) / bs > md.max_blocks_per_seq)
      return absl::InvalidArgumentError(
          absl::StrCat("Attention: inconsistent metadata for sequence ", s));
    for (int32_t i = 0; i < num_new; i += kAttentionQueryBlock) {
      // Position of the block's first query; causal: query i sees keys 0..first_pos + i.
      const int32_t count = std::min<int32_t>(kAttentionQueryBlock, num_new - i);
      blocks.push_back({s, query_start[s] + i, context_len[s] - num_new + i, count});
    }
  }
  const float* slope = slopes.as<const float>();
  const AttentionIsa isa = BestAttentionIsa();
  const int64_t num_blocks = static_cast<int64_t>(blocks.size());
  const bool bf16 = spec.dtype == DType::kBF16;
  pool_->ParallelFor(num_blocks * heads, 1, [&](int64_t b, int64_t e) {
    std::vector<float>& scores = Scratch<float>(2, 0);
    std::vector<const float*>& keys = Scratch<const float*>(0, 0);
    std::vector<const float*>& values = Scratch<const float*>(1, 0);
    std::vector<const uint16_t*>& bf16_keys = Scratch<const uint16_t*>(0, 0);
    std::vector<const uint16_t*>& bf16_values = Scratch<const uint16_t*>(1, 0);
    for (int64_t item = b; item < e; ++item) {
      // Head-major: consecutive items are one head's query blocks, which read the same key and
      // value rows, so those stay in L2 (a 512-token prefill of bloom-560m reads 256 KiB of
      // them per head; token-major order cycled through every head's, 16 times that).
      const int64_t h = item / num_blocks;
      const QueryBlock& block = blocks[item % num_blocks];
      const int64_t num_keys = block.first_pos + block.num_queries;
      const int32_t* table = tables + static_cast<int64_t>(block.seq) * md.max_blocks_per_seq;
      if (bf16) {
        KeyValueRows(kv, layer, h, table, num_keys, bf16_keys, bf16_values);
      } else {
        KeyValueRows(kv, layer, h, table, num_keys, keys, values);
      }
      AttentionQueries queries;
      queries.q = q.as<const float>() + (block.first_token * heads + h) * d;
      queries.q_stride = heads * d;
      queries.out = out.as<float>() + (block.first_token * heads + h) * d;
      queries.out_stride = heads * d;
      queries.num_queries = block.num_queries;
      queries.first_pos = block.first_pos;
      if (bf16) {
        queries.bf16_keys = bf16_keys.data();
        queries.bf16_values = bf16_values.data();
      } else {
        queries.keys = keys.data();
        queries.values = values.data();
      }
      queries.head_dim = d;
      queries.slope = slope[h];
      queries.scale = scale;  // Hugging Face: baddbmm(alibi, q, k^T, beta=1, alpha=1/sqrt(d))
      AttendQueries(queries, isa, &scores);
    }
  });
  return absl::OkStatus();
}

}  // namespace blossom
